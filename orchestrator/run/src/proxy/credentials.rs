//! The credentials the egress proxy adds on an agent's behalf: their values, read from
//! the coordinator's environment ([`Secret`]), the run's certificate authority that
//! signs the proxy's certificate for each such host ([`Authority`]), the CA bundle the
//! sandbox trusts ([`Bundle`]) and the TLS client that verifies the real server.
//!
//! Nothing here ever reaches a sandbox but the authority's certificate: its key, the
//! secrets and the headers built from them stay in the coordinator.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use orch_types::{Credential, CredentialKind};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why a credential cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("`{0}` is not a host name with an optional port")]
    Host(String),
    #[error("the credential for `{0}` must name exactly one of `basic_env` and `bearer_env`")]
    Variable(String),
    #[error(
        "`{var}` is not set, or empty, in orch's environment (the credential for `{host}`): export it before running orch"
    )]
    Unset { var: String, host: String },
    #[error("`{var}` must hold `user:token` for HTTP Basic (the credential for `{host}`)")]
    NotBasic { var: String, host: String },
    #[error("cannot read the CA `{path}` of the credential for `{host}`: {reason}")]
    Ca { path: String, host: String, reason: String },
    #[error("cannot make the run's certificate authority: {0}")]
    Authority(String),
    #[error("cannot write the sandbox's CA bundle: {0}")]
    Bundle(std::io::Error),
}

/// Whether `var` is set and not empty for the coordinator (orch's own secrets included,
/// which it took out of the environment at start).
pub fn is_set(var: &str) -> bool {
    crate::secrets::var(var).is_some()
}

/// One credential, ready for the proxy: the `Authorization` value for one host and
/// port, what to redact from responses, and how to verify the real server.
pub struct Secret {
    pub host: String,
    pub port: u16,
    /// The variable it came from, for messages (never the value).
    pub var: String,
    authorization: String,
    /// The forms of the value a server could hand back: the value, the token of
    /// `user:token`, the header's base64. Longest first.
    redact: Vec<Vec<u8>>,
    /// Verifies the real server: the system's roots or the credential's `ca`.
    pub upstream: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret").field("host", &self.host).field("port", &self.port).field("var", &self.var).finish()
    }
}

fn policy_name(host: &str) -> String {
    super::policy::normalize(host)
}

/// The fewest bytes a form of a secret must have to be redacted from responses (shorter
/// ones would rewrite ordinary text).
const MIN_REDACT: usize = 4;

impl Secret {
    /// Reads the credential's value from the coordinator's environment; relative `ca`
    /// paths are taken from `root`.
    pub fn load(credential: &Credential, root: &Path) -> Result<Secret, CredentialError> {
        let (host, port) = credential.host_port().ok_or_else(|| CredentialError::Host(credential.host.clone()))?;
        let (var, kind) = credential.variable().ok_or_else(|| CredentialError::Variable(credential.host.clone()))?;
        let value = crate::secrets::var(var)
            .ok_or_else(|| CredentialError::Unset { var: var.to_string(), host: host.clone() })?;
        crate::run::mask_value(value.trim());
        let ca = credential.ca.as_deref().map(|ca| (root.join(ca), ca.to_string()));
        Secret::new(&host, port, kind, value.trim(), var, ca.as_ref().map(|(p, t)| (p.as_path(), t.as_str())))
    }

    /// A credential for `host:port` with its value; `ca` (the path, and how the
    /// workflow wrote it) verifies the real server instead of the system's roots.
    pub fn new(
        host: &str,
        port: u16,
        kind: CredentialKind,
        value: &str,
        var: &str,
        ca: Option<(&Path, &str)>,
    ) -> Result<Secret, CredentialError> {
        let host = policy_name(host);
        let mut redact = vec![value.as_bytes().to_vec()];
        let authorization = match kind {
            CredentialKind::Bearer => format!("Bearer {value}"),
            CredentialKind::Basic => {
                let Some((_, token)) = value.split_once(':') else {
                    return Err(CredentialError::NotBasic { var: var.to_string(), host });
                };
                let encoded = base64::engine::general_purpose::STANDARD.encode(value);
                redact.push(token.as_bytes().to_vec());
                redact.push(encoded.trim_end_matches('=').as_bytes().to_vec());
                format!("Basic {encoded}")
            }
        };
        redact.retain(|r| r.len() >= MIN_REDACT);
        redact.sort_by_key(|r| std::cmp::Reverse(r.len()));
        redact.dedup();
        let upstream = client_config(ca, &host)?;
        Ok(Secret { host, port, var: var.to_string(), authorization, redact, upstream })
    }

    /// The `Authorization` header value sent to the real server.
    pub fn authorization(&self) -> &str {
        &self.authorization
    }

    /// The byte strings to redact from responses, longest first.
    pub fn redactions(&self) -> &[Vec<u8>] {
        &self.redact
    }
}

/// The TLS client of intercepted hosts: the credential's CA, or the system's roots
/// (`SSL_CERT_FILE` and `SSL_CERT_DIR` override them, as for OpenSSL). The system's
/// roots are read and parsed once per process, not once per agent and credential.
fn client_config(ca: Option<(&Path, &str)>, host: &str) -> Result<Arc<rustls::ClientConfig>, CredentialError> {
    static SYSTEM: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    if ca.is_none()
        && let Some(config) = SYSTEM.get()
    {
        return Ok(config.clone());
    }
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some((path, ca)) => {
            let bad = |reason: String| CredentialError::Ca { path: ca.to_string(), host: host.to_string(), reason };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("it holds no PEM certificate".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!("reading the system's root certificates: {error}");
            }
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::warn!(
                    "no system root certificates were found; credentials without `ca:` cannot verify their servers"
                );
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| CredentialError::Authority(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut config = config;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    if ca.is_none() {
        return Ok(SYSTEM.get_or_init(|| config).clone());
    }
    Ok(config)
}

/// The run's certificate authority, made in memory at the first credential: it signs a
/// certificate for each intercepted host. Its key never leaves this struct.
pub struct Authority {
    issuer: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    pem: String,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl Authority {
    pub fn new() -> Result<Authority, CredentialError> {
        let err = |e: rcgen::Error| CredentialError::Authority(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(err)?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.distinguished_name.push(rcgen::DnType::CommonName, "orch egress proxy (this run only)");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
        let (now, day) = (time::OffsetDateTime::now_utc(), time::Duration::days(1));
        params.not_before = now - day;
        params.not_after = now + 7 * day;
        let issuer = rcgen::CertifiedIssuer::self_signed(params, key).map_err(err)?;
        let pem = issuer.pem();
        Ok(Authority { issuer, pem, leaves: Mutex::new(HashMap::new()) })
    }

    /// The authority's certificate, PEM: what the sandbox trusts.
    pub fn certificate_pem(&self) -> &str {
        &self.pem
    }

    /// A TLS server configuration presenting a certificate for `host`, signed by the
    /// authority (made once per host).
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, CredentialError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(config) = leaves.get(host) {
            return Ok(config.clone());
        }
        let err = |e: rcgen::Error| CredentialError::Authority(e.to_string());
        let key = rcgen::KeyPair::generate().map_err(err)?;
        let mut params = rcgen::CertificateParams::new(vec![host.to_string()]).map_err(err)?;
        params.distinguished_name.push(rcgen::DnType::CommonName, host);
        params.is_ca = rcgen::IsCa::ExplicitNoCa;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let (now, day) = (time::OffsetDateTime::now_utc(), time::Duration::days(1));
        params.not_before = now - day;
        params.not_after = now + 7 * day;
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| CredentialError::Authority(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .map_err(|e| CredentialError::Authority(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        leaves.insert(host.to_string(), config.clone());
        Ok(config)
    }
}

/// The variables that point TLS clients at a CA bundle: OpenSSL's (and so curl's, git's,
/// Python's `ssl`), git's, curl's, Python requests', Node's and cargo's.
pub const CA_VARS: [&str; 6] = [
    "SSL_CERT_FILE",
    "GIT_SSL_CAINFO",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "CARGO_HTTP_CAINFO",
];

/// Where the system's CA bundle usually is (Debian and Ubuntu, Fedora, Alpine and
/// others), when `SSL_CERT_FILE` does not say.
const SYSTEM_BUNDLES: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// The CA bundle of the sandboxes that have credentials: the system's roots (so other
/// hosts, passed through, verify as before) and the run's authority. A world-readable
/// file in a directory of its own, removed with this value.
pub struct Bundle {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl Bundle {
    pub fn write(authority: &Authority) -> Result<Bundle, CredentialError> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::Builder::new().prefix("orch-ca-").tempdir().map_err(CredentialError::Bundle)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(CredentialError::Bundle)?;
        let mut text = system_bundle().unwrap_or_default();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(authority.certificate_pem());
        let path = dir.path().join("ca-bundle.pem");
        std::fs::write(&path, text).map_err(CredentialError::Bundle)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).map_err(CredentialError::Bundle)?;
        Ok(Bundle { dir, path })
    }

    /// The directory holding the bundle: a read root of the sandboxes that use it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// [`CA_VARS`], each naming the bundle.
    pub fn env(&self) -> Vec<(String, String)> {
        CA_VARS.iter().map(|v| (v.to_string(), self.path.display().to_string())).collect()
    }
}

/// The system's CA bundle: `SSL_CERT_FILE` when it names a readable file, else the
/// first of [`SYSTEM_BUNDLES`] there is.
fn system_bundle() -> Option<String> {
    let named = std::env::var_os("SSL_CERT_FILE").map(PathBuf::from);
    named.into_iter().chain(SYSTEM_BUNDLES.iter().map(PathBuf::from)).find_map(|p| std::fs::read_to_string(p).ok())
}

/// The credentials of an allowlist, loaded; an error names the first that cannot be.
pub fn load_all(credentials: &[Credential], root: &Path) -> Result<Vec<Arc<Secret>>, CredentialError> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for credential in credentials {
        let secret = Secret::load(credential, root)?;
        if seen.insert((secret.host.clone(), secret.port)) {
            out.push(Arc::new(secret));
        }
    }
    Ok(out)
}
