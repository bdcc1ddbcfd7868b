//! The client assertion of `private_key_jwt` (RFC 7523, RFC 7521): a JWT the OAuth
//! client signs with its private key instead of sending a secret. Keys are PEM (PKCS#8
//! RSA or P-256, or PKCS#1 RSA), read from the coordinator's environment; signing uses
//! `ring`, the crypto rustls already uses.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use rand::RngCore as _;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, RSA_PKCS1_SHA256};
use serde_json::json;

/// How long an assertion is valid: long enough for one token request.
const LIFETIME_SECS: u64 = 300;

/// A private key that signs client assertions.
pub struct SigningKey {
    key: Key,
}

enum Key {
    Rsa(ring::rsa::KeyPair),
    Ec(EcdsaKeyPair),
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.key {
            Key::Rsa(_) => "SigningKey(RS256)",
            Key::Ec(_) => "SigningKey(ES256)",
        })
    }
}

impl SigningKey {
    /// Reads a PEM key; `algorithm` (`RS256`, `ES256`) must fit it when given. `Err`
    /// says what is wrong with the key, never its content.
    pub fn from_pem(pem: &str, algorithm: Option<&str>) -> Result<SigningKey, String> {
        let (label, der) = pem_block(pem)?;
        let key = match label.as_str() {
            "PRIVATE KEY" => match ring::rsa::KeyPair::from_pkcs8(&der) {
                Ok(rsa) => Key::Rsa(rsa),
                Err(_) => EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &SystemRandom::new())
                    .map(Key::Ec)
                    .map_err(|_| "it is neither an RSA key (2048 bits or more) nor a P-256 key".to_string())?,
            },
            "RSA PRIVATE KEY" => ring::rsa::KeyPair::from_der(&der)
                .map(Key::Rsa)
                .map_err(|e| format!("it is not a usable RSA key ({e}); RSA keys need 2048 bits or more"))?,
            "EC PRIVATE KEY" => {
                return Err(
                    "it is a SEC1 EC key; convert it to PKCS#8 with `openssl pkcs8 -topk8 -nocrypt -in key.pem`".into(),
                );
            }
            "ENCRYPTED PRIVATE KEY" => {
                return Err("it is encrypted; give the key without a passphrase (PKCS#8)".into());
            }
            other => return Err(format!("its PEM block is `{other}`, not `PRIVATE KEY` or `RSA PRIVATE KEY`")),
        };
        let key = SigningKey { key };
        match algorithm {
            Some(alg) if alg != key.algorithm() => Err(format!(
                "it is a {} key, which cannot sign {alg}; write `signing_algorithm: {}`",
                key.kind(),
                key.algorithm()
            )),
            _ => Ok(key),
        }
    }

    /// The JWS algorithm this key signs with.
    pub fn algorithm(&self) -> &'static str {
        match self.key {
            Key::Rsa(_) => "RS256",
            Key::Ec(_) => "ES256",
        }
    }

    fn kind(&self) -> &'static str {
        match self.key {
            Key::Rsa(_) => "an RSA",
            Key::Ec(_) => "a P-256",
        }
    }

    /// A client assertion: `client_id` as issuer and subject, `audience` (the
    /// authorization server's issuer), valid for [`LIFETIME_SECS`], with a fresh `jti`.
    pub fn assertion(&self, client_id: &str, audience: &str) -> Result<String, String> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
        let mut jti = [0u8; 16];
        rand::rng().fill_bytes(&mut jti);
        let header = json!({"alg": self.algorithm(), "typ": "JWT"});
        let claims = json!({
            "iss": client_id,
            "sub": client_id,
            "aud": audience,
            "iat": now,
            "exp": now + LIFETIME_SECS,
            "jti": URL_SAFE_NO_PAD.encode(jti),
        });
        let signing_input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let rng = SystemRandom::new();
        let signature = match &self.key {
            Key::Rsa(key) => {
                let mut signature = vec![0u8; key.public().modulus_len()];
                key.sign(&RSA_PKCS1_SHA256, &rng, signing_input.as_bytes(), &mut signature)
                    .map_err(|_| "the RSA key could not sign the client assertion".to_string())?;
                signature
            }
            Key::Ec(key) => key
                .sign(&rng, signing_input.as_bytes())
                .map_err(|_| "the P-256 key could not sign the client assertion".to_string())?
                .as_ref()
                .to_vec(),
        };
        Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

/// The label and bytes of the first PEM block of `pem`.
fn pem_block(pem: &str) -> Result<(String, Vec<u8>), String> {
    let not_pem = || "it is not a PEM key (`-----BEGIN PRIVATE KEY-----` ...)".to_string();
    let start = pem.find("-----BEGIN ").ok_or_else(not_pem)?;
    let rest = &pem[start + "-----BEGIN ".len()..];
    let (label, rest) = rest.split_once("-----").ok_or_else(not_pem)?;
    let end = format!("-----END {label}-----");
    let body = &rest[..rest.find(&end).ok_or_else(not_pem)?];
    let base64: String = body.split_whitespace().filter(|line| !line.contains(':')).collect();
    let der = STANDARD.decode(base64).map_err(|_| "its PEM block is not valid base64".to_string())?;
    Ok((label.to_string(), der))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;
    use ring::signature::{ECDSA_P256_SHA256_FIXED, KeyPair as _, UnparsedPublicKey};

    fn ec_pem() -> (String, Vec<u8>) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let public = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap()
            .public_key()
            .as_ref()
            .to_vec();
        let body = STANDARD.encode(pkcs8.as_ref());
        let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
        (format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", lines.join("\n")), public)
    }

    #[test]
    fn an_ec_assertion_verifies_with_the_public_key() {
        let (pem, public) = ec_pem();
        let key = SigningKey::from_pem(&pem, None).unwrap();
        assert_eq!(key.algorithm(), "ES256");
        let jwt = key.assertion("orch-ci", "https://auth.example").unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let claims: serde_json::Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!((claims["iss"].as_str(), claims["sub"].as_str()), (Some("orch-ci"), Some("orch-ci")));
        assert_eq!(claims["aud"], "https://auth.example");
        assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), LIFETIME_SECS);
        let signed = format!("{}.{}", parts[0], parts[1]);
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &public).verify(signed.as_bytes(), &signature).unwrap();
        // A changed claim no longer verifies: the signature covers it.
        let forged = format!("{}.{}", parts[0], URL_SAFE_NO_PAD.encode(b"{\"sub\":\"admin\"}"));
        assert!(
            UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &public).verify(forged.as_bytes(), &signature).is_err()
        );
        // Two assertions never share a jti.
        let other = key.assertion("orch-ci", "https://auth.example").unwrap();
        assert_ne!(jwt, other);
    }

    #[test]
    fn bad_keys_say_what_is_wrong_without_their_content() {
        let (pem, _) = ec_pem();
        let err = SigningKey::from_pem(&pem, Some("RS256")).unwrap_err();
        assert!(err.contains("P-256") && err.contains("ES256"), "{err}");
        let err = SigningKey::from_pem("hunter2", None).unwrap_err();
        assert!(err.contains("not a PEM key") && !err.contains("hunter2"), "{err}");
        let sec1 = "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n";
        assert!(SigningKey::from_pem(sec1, None).unwrap_err().contains("openssl pkcs8"));
        let garbage = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n";
        let err = SigningKey::from_pem(garbage, None).unwrap_err();
        assert!(err.contains("neither an RSA key"), "{err}");
    }
}
