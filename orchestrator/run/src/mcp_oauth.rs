//! OAuth for HTTP MCP servers in unattended runs: the MCP authorization spec with a
//! client registered in advance and the client credentials grant (no browser, no
//! person). Declared as `oauth:` of an HTTP server ([`McpOAuth`]).
//!
//! The flow is reactive. Requests go out without a token until the server answers 401;
//! its `WWW-Authenticate` challenge starts discovery (rmcp's `AuthorizationManager`):
//! the protected-resource metadata (RFC 9728: the challenge's `resource_metadata`,
//! else the well-known URLs, path first), then the authorization server's metadata
//! (RFC 8414, then OpenID discovery, each with its path variants, and the 2025-03-26
//! default endpoints when nothing is published), unless `auth_server_metadata_url`
//! names it. The token request is the client credentials grant, authenticated with the
//! client secret (HTTP Basic, or the form when the server takes only that) or a signed
//! assertion (`private_key_jwt`, RFC 7523), for the scopes `oauth.scopes` pins, else
//! those the challenge names, else the resource's `scopes_supported`, else none, and
//! the server's URL as `resource` (RFC 8707).
//!
//! A token about to expire is renewed before it is sent (its refresh token, else the
//! grant again); a request the server answers 401, or 403 `insufficient_scope` (which
//! adds the scopes it names), is sent once more with a fresh token ([`crate::mcp_oauth_http`]).
//! Tokens and secrets stay in this module, in the coordinator's memory: never in a
//! sandbox, an event, a transcript, or an error message.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use orch_workflows::extensions::{McpOAuth, OAUTH_NEEDS_CREDENTIALS};
use rmcp::transport::auth::{AuthorizationManager, AuthorizationMetadataSource, WWWAuthenticateParams};
use serde_json::Value;
use url::Url;

use crate::mcp_oauth_jwt::SigningKey;

/// How long a token request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A token is renewed when less than this is left of it (or half its lifetime, for a
/// short one).
const RENEW_BEFORE: Duration = Duration::from_secs(60);

/// The longest text of an authorization server's error kept in a message.
const MAX_DESCRIPTION: usize = 200;

/// How the client proves who it is.
enum Credential {
    Secret { var: String, value: String },
    Key { var: String, key: Box<SigningKey> },
}

impl Credential {
    /// Where a wrong credential is to be fixed, for messages.
    fn check(&self, client_id: &str) -> String {
        match self {
            Credential::Secret { var, .. } => format!("the client id `{client_id}` and the secret in `${var}`"),
            Credential::Key { var, .. } => {
                format!("the client id `{client_id}` and that the server knows the public key of `${var}`")
            }
        }
    }
}

/// The authorization server's token endpoint and what its metadata says about it.
#[derive(Debug, Clone)]
struct Endpoint {
    token_url: Url,
    issuer: Option<String>,
    auth_methods: Option<Vec<String>>,
    signing_algs: Option<Vec<String>>,
    grant_types: Option<Vec<String>>,
    /// The endpoint is the 2025-03-26 default (`/token`), not published metadata.
    guessed: bool,
}

struct Token {
    access: String,
    refresh: Option<String>,
    renew_at: Option<Instant>,
}

#[derive(Default)]
struct State {
    endpoint: Option<Endpoint>,
    token: Option<Token>,
    /// The scopes asked for (and, after a step-up, the ones added).
    scopes: Vec<String>,
}

struct Inner {
    server: String,
    url: Url,
    client_id: String,
    credential: Credential,
    pinned_scopes: Option<Vec<String>>,
    metadata_url: Option<Url>,
    http: reqwest::Client,
    state: tokio::sync::Mutex<State>,
    failure: Mutex<Option<String>>,
}

/// The OAuth client of one HTTP MCP server: its tokens and how it gets them.
#[derive(Clone)]
pub struct OAuth(Arc<Inner>);

impl std::fmt::Debug for OAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuth").field("server", &self.0.server).field("client_id", &self.0.client_id).finish()
    }
}

/// Whether `url`'s host is this machine.
fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost") || d.ends_with(".localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Tokens and secrets go only over https, or to this machine.
fn safe_to_send(url: &Url) -> bool {
    url.scheme() == "https" || (url.scheme() == "http" && is_loopback(url))
}

fn scope_list(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for scope in text.split_whitespace() {
        if !out.iter().any(|s| s == scope) {
            out.push(scope.to_string());
        }
    }
    out
}

fn one_line(text: &str) -> String {
    let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match text.char_indices().nth(MAX_DESCRIPTION) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

fn string_list(metadata: &Value, key: &str) -> Option<Vec<String>> {
    metadata.get(key)?.as_array().map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
}

impl OAuth {
    /// The client of server `server` at `url`, with the secret or key read through
    /// `lookup` (the coordinator's environment). `Err` says what to set or fix.
    pub fn new(
        server: &str,
        url: &str,
        config: &McpOAuth,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<OAuth, String> {
        let url = Url::parse(url).map_err(|e| format!("its url `{url}` is not a URL ({e})"))?;
        if !safe_to_send(&url) {
            return Err(format!(
                "its url `{url}` is plain http to another machine, and orch sends OAuth tokens only over https (or to a loopback address); use an https url"
            ));
        }
        let read = |var: &str| {
            lookup(var).filter(|v| !v.trim().is_empty()).ok_or_else(|| {
                format!("`${var}` is not set in orch's environment; set it to the OAuth client's credential (from a CI secret, for instance)")
            })
        };
        let credential = match (&config.client_secret_env, &config.private_key_env) {
            (Some(var), _) => Credential::Secret { var: var.clone(), value: read(var)? },
            (None, Some(var)) => {
                let key = SigningKey::from_pem(&read(var)?, config.signing_algorithm.as_deref())
                    .map_err(|why| format!("the private key in `${var}` cannot be used: {why}"))?;
                Credential::Key { var: var.clone(), key: Box::new(key) }
            }
            (None, None) => return Err(OAUTH_NEEDS_CREDENTIALS.to_string()),
        };
        let metadata_url = match &config.auth_server_metadata_url {
            Some(text) => {
                let parsed = Url::parse(text)
                    .map_err(|e| format!("`oauth.auth_server_metadata_url` `{text}` is not a URL ({e})"))?;
                if !safe_to_send(&parsed) {
                    return Err(format!(
                        "`oauth.auth_server_metadata_url` `{text}` must be https (or a loopback address)"
                    ));
                }
                Some(parsed)
            }
            None => None,
        };
        // reqwest's TLS needs a crypto provider (the same one the model clients install).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot make the OAuth HTTP client: {e}"))?;
        Ok(OAuth(Arc::new(Inner {
            server: server.to_string(),
            url,
            client_id: config.client_id.clone(),
            credential,
            pinned_scopes: config.scopes.as_deref().map(scope_list),
            metadata_url,
            http,
            state: tokio::sync::Mutex::new(State::default()),
            failure: Mutex::new(None),
        })))
    }

    /// Why the last authorization failed, if it did: a sentence for the server's error.
    pub fn failure(&self) -> Option<String> {
        self.0.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records why authorization failed (and gives it back, for the request's error).
    pub fn fail(&self, why: String) -> String {
        *self.0.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
        why
    }

    /// The token to send now: `None` before the server first asked for one. A token
    /// about to expire is renewed first.
    pub async fn token(&self) -> Result<Option<String>, String> {
        let mut state = self.0.state.lock().await;
        let Some(token) = &state.token else { return Ok(None) };
        if token.renew_at.is_none_or(|at| Instant::now() < at) {
            return Ok(Some(token.access.clone()));
        }
        tracing::debug!(server = %self.0.server, "the OAuth token is about to expire; renewing it");
        self.renew_locked(&mut state).await.map(Some).map_err(|why| self.fail(why))
    }

    /// A fresh token after the server refused `sent` with `challenge` (its
    /// `WWW-Authenticate`, possibly empty); `step_up` for a 403 `insufficient_scope`,
    /// whose scopes are added to those asked for.
    pub async fn authorize(&self, challenge: &str, sent: Option<&str>, step_up: bool) -> Result<String, String> {
        let mut state = self.0.state.lock().await;
        if !step_up
            && let Some(token) = &state.token
            && Some(token.access.as_str()) != sent
        {
            // Another request renewed it meanwhile.
            return Ok(token.access.clone());
        }
        let params = WWWAuthenticateParams::parse(challenge, &self.0.url);
        if state.endpoint.is_none() {
            let (endpoint, scopes) = self.discover(challenge).await.map_err(|why| self.fail(why))?;
            state.endpoint = Some(endpoint);
            state.scopes = self.0.pinned_scopes.clone().unwrap_or(scopes);
        } else if step_up {
            let before = state.scopes.len();
            for scope in params.scope.as_deref().map(scope_list).unwrap_or_default() {
                if !state.scopes.contains(&scope) {
                    state.scopes.push(scope);
                }
            }
            if state.scopes.len() == before {
                return Err(self.fail(format!(
                    "the server refused the token for lacking scope{}, and orch already asks for every scope it names; check the scopes the client `{}` may have",
                    params.scope.as_deref().map(|s| format!(" `{s}`")).unwrap_or_default(),
                    self.0.client_id
                )));
            }
        }
        // A refused token is not refreshed: the grant gives one for the current scopes.
        state.token = None;
        self.renew_locked(&mut state).await.map_err(|why| self.fail(why))
    }

    /// Gets a new token into `state` (its refresh token first, when it has one).
    async fn renew_locked(&self, state: &mut State) -> Result<String, String> {
        let Some(endpoint) = state.endpoint.clone() else {
            return Err("orch has no token endpoint for this server yet".into());
        };
        if let Some(refresh) = state.token.as_ref().and_then(|t| t.refresh.clone()) {
            let form = vec![("grant_type", "refresh_token".to_string()), ("refresh_token", refresh)];
            match self.request(&endpoint, form, &state.scopes).await {
                Ok(token) => return Ok(Self::keep(state, token)),
                Err(why) => {
                    tracing::debug!(server = %self.0.server, "refreshing the OAuth token failed, so orch asks for a new one: {why}")
                }
            }
        }
        let form = vec![("grant_type", "client_credentials".to_string())];
        let token = self.request(&endpoint, form, &state.scopes).await?;
        Ok(Self::keep(state, token))
    }

    fn keep(state: &mut State, token: Token) -> String {
        let access = token.access.clone();
        state.token = Some(token);
        access
    }

    /// The token endpoint, and the scopes the challenge or the resource's metadata name.
    async fn discover(&self, challenge: &str) -> Result<(Endpoint, Vec<String>), String> {
        let params = WWWAuthenticateParams::parse(challenge, &self.0.url);
        if let Some(url) = &self.0.metadata_url {
            let response =
                self.0.http.get(url.clone()).header("accept", "application/json").send().await.map_err(|e| {
                    format!("cannot read the authorization server's metadata at {url}: {}", describe_reqwest(&e))
                })?;
            let status = response.status();
            if !status.is_success() {
                return Err(format!(
                    "the authorization server's metadata at {url} answered HTTP {status}; check `oauth.auth_server_metadata_url`"
                ));
            }
            let metadata: Value = response.json().await.map_err(|_| {
                format!(
                    "the authorization server's metadata at {url} is not JSON; check `oauth.auth_server_metadata_url`"
                )
            })?;
            let endpoint = self.endpoint(&metadata, false)?;
            return Ok((endpoint, params.scope.as_deref().map(scope_list).unwrap_or_default()));
        }
        let manager = AuthorizationManager::new_allowing_private_addresses(self.0.url.as_str())
            .await
            .map_err(|e| format!("cannot start OAuth discovery: {e}"))?;
        let challenge = Some(challenge).filter(|c| !c.trim().is_empty());
        let resolution = manager.resolve_metadata_from_challenge(challenge).await.map_err(|e| {
            format!("OAuth discovery failed: {}; check that the server publishes its OAuth metadata (RFC 9728), or set `oauth.auth_server_metadata_url`", one_line(&e.to_string()))
        })?;
        let guessed = resolution.source == AuthorizationMetadataSource::LegacyEndpointFallback;
        let metadata = serde_json::to_value(&resolution.metadata).unwrap_or_default();
        let endpoint = self.endpoint(&metadata, guessed)?;
        // The challenge's scopes, else the resource's `scopes_supported`; no
        // `offline_access`, which is for people's sessions.
        let scopes = manager.select_initial_scopes(&[]).await.into_iter().filter(|s| s != "offline_access").collect();
        tracing::debug!(server = %self.0.server, token_endpoint = %endpoint.token_url, "OAuth discovery done");
        Ok((endpoint, scopes))
    }

    fn endpoint(&self, metadata: &Value, guessed: bool) -> Result<Endpoint, String> {
        let text = metadata.get("token_endpoint").and_then(Value::as_str).unwrap_or_default();
        let token_url = Url::parse(text).map_err(|_| {
            format!("the authorization server's metadata has no usable `token_endpoint` (`{}`)", one_line(text))
        })?;
        if !safe_to_send(&token_url) {
            return Err(format!(
                "the token endpoint {token_url} is plain http to another machine, and orch sends the client's credential only over https (or to a loopback address)"
            ));
        }
        Ok(Endpoint {
            token_url,
            issuer: metadata.get("issuer").and_then(Value::as_str).filter(|s| !s.is_empty()).map(String::from),
            auth_methods: string_list(metadata, "token_endpoint_auth_methods_supported"),
            signing_algs: string_list(metadata, "token_endpoint_auth_signing_alg_values_supported"),
            grant_types: string_list(metadata, "grant_types_supported"),
            guessed,
        })
    }

    /// One token request: `form` plus the client's authentication, the scopes and the
    /// resource.
    async fn request(
        &self,
        endpoint: &Endpoint,
        mut form: Vec<(&str, String)>,
        scopes: &[String],
    ) -> Result<Token, String> {
        let inner = &self.0;
        let supports = |method: &str| endpoint.auth_methods.as_ref().is_none_or(|m| m.iter().any(|x| x == method));
        let mut basic = None;
        match &inner.credential {
            Credential::Secret { value, .. } => {
                // RFC 8414: a server that lists no methods takes client_secret_basic.
                if supports("client_secret_basic") {
                    basic = Some(value.as_str());
                } else if supports("client_secret_post") {
                    form.push(("client_id", inner.client_id.clone()));
                    form.push(("client_secret", value.clone()));
                } else {
                    return Err(self.unsupported_methods(endpoint, "client_secret_basic or client_secret_post"));
                }
            }
            Credential::Key { key, .. } => {
                if !supports("private_key_jwt") {
                    return Err(self.unsupported_methods(endpoint, "private_key_jwt"));
                }
                if let Some(algs) = &endpoint.signing_algs
                    && !algs.iter().any(|a| a == key.algorithm())
                {
                    return Err(format!(
                        "the authorization server takes client assertions signed with {}, not {}; use a key of one of those kinds",
                        algs.join(", "),
                        key.algorithm()
                    ));
                }
                // RFC 7523bis: the audience is the authorization server's issuer.
                let audience = endpoint.issuer.clone().unwrap_or_else(|| endpoint.token_url.to_string());
                form.push(("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".into()));
                form.push(("client_assertion", key.assertion(&inner.client_id, &audience)?));
            }
        }
        if !scopes.is_empty() {
            form.push(("scope", scopes.join(" ")));
        }
        form.push(("resource", resource(&inner.url)));
        let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form.iter()).finish();
        let mut request = inner
            .http
            .post(endpoint.token_url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body);
        if let Some(secret) = basic {
            // RFC 6749 2.3.1: each part form-encoded, then Base64.
            let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", encode(&inner.client_id), encode(secret));
            request = request
                .header("authorization", format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)));
        }
        let asked = Instant::now();
        let response = request
            .send()
            .await
            .map_err(|e| format!("the token request to {} failed: {}", endpoint.token_url, describe_reqwest(&e)))?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(self.refused(endpoint, status, &body, scopes));
        }
        let Some(access) = body.get("access_token").and_then(Value::as_str).filter(|t| !t.is_empty()) else {
            return Err(format!("the token endpoint {} answered without an `access_token`", endpoint.token_url));
        };
        if let Some(kind) = body.get("token_type").and_then(Value::as_str)
            && !kind.eq_ignore_ascii_case("bearer")
        {
            return Err(format!(
                "the token endpoint {} gave a `{}` token, and MCP servers take bearer tokens",
                endpoint.token_url,
                one_line(kind)
            ));
        }
        let renew_at = body.get("expires_in").and_then(Value::as_u64).map(|secs| {
            let lifetime = Duration::from_secs(secs);
            asked + lifetime.saturating_sub(RENEW_BEFORE.min(lifetime / 2))
        });
        tracing::debug!(server = %inner.server, expires_in = ?body.get("expires_in"), "got an OAuth token");
        Ok(Token {
            access: access.to_string(),
            refresh: body.get("refresh_token").and_then(Value::as_str).map(String::from),
            renew_at,
        })
    }

    fn unsupported_methods(&self, endpoint: &Endpoint, wanted: &str) -> String {
        let listed = endpoint.auth_methods.as_deref().unwrap_or_default().join(", ");
        format!(
            "the authorization server authenticates clients with {listed}, not {wanted}; declare the credential it takes (`client_secret_env` or `private_key_env`)"
        )
    }

    /// The message for a refused token request, naming what to check.
    fn refused(&self, endpoint: &Endpoint, status: reqwest::StatusCode, body: &Value, scopes: &[String]) -> String {
        let inner = &self.0;
        let code = body.get("error").and_then(Value::as_str).map(one_line);
        let what = match (&code, body.get("error_description").and_then(Value::as_str)) {
            (Some(code), Some(text)) => format!("{code} ({})", one_line(text)),
            (Some(code), None) => code.clone(),
            (None, _) => format!("HTTP {status}"),
        };
        let check = match code.as_deref() {
            Some("invalid_client") | Some("unauthorized_client") => inner.credential.check(&inner.client_id),
            Some("invalid_scope") => format!(
                "the scopes asked for ({}); pin them with `oauth.scopes`",
                if scopes.is_empty() { "none".to_string() } else { format!("`{}`", scopes.join(" ")) }
            ),
            Some("unsupported_grant_type") => {
                let listed = endpoint
                    .grant_types
                    .as_deref()
                    .map(|g| format!(" (it lists {})", g.join(", ")))
                    .unwrap_or_default();
                format!("that the authorization server allows this client the client credentials grant{listed}")
            }
            _ if endpoint.guessed => format!(
                "the server: it published no OAuth metadata, so orch tried the default endpoint {}; set `oauth.auth_server_metadata_url`",
                endpoint.token_url
            ),
            _ => inner.credential.check(&inner.client_id),
        };
        let host = endpoint.token_url.host_str().unwrap_or("the token endpoint");
        format!("the authorization server at {host} refused the token request: {what}; check {check}")
    }
}

/// The server as an RFC 8707 resource: its URL without a fragment.
fn resource(url: &Url) -> String {
    let mut url = url.clone();
    url.set_fragment(None);
    url.to_string()
}

/// A reqwest failure in a few words (its source chain, which names the cause: refused,
/// timed out, TLS), without its Rust type.
pub fn describe_reqwest(error: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    if error.is_timeout() {
        parts.push("it timed out".into());
    } else if error.is_connect() {
        parts.push("cannot connect".into());
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    if parts.is_empty() {
        parts.push(error.to_string());
    }
    one_line(&parts.join(": "))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    fn config(json: &str) -> McpOAuth {
        serde_json::from_str(json).unwrap()
    }

    fn env(var: &str) -> Option<String> {
        (var == "SECRET").then(|| "s3cret".to_string())
    }

    #[test]
    fn credentials_come_from_the_environment_and_only_go_over_https() {
        let secret = config(r#"{"client_id": "ci", "client_secret_env": "SECRET"}"#);
        assert!(OAuth::new("t", "https://mcp.example/mcp", &secret, &env).is_ok());
        assert!(OAuth::new("t", "http://127.0.0.1:9/mcp", &secret, &env).is_ok());
        let err = OAuth::new("t", "http://mcp.example/mcp", &secret, &env).unwrap_err();
        assert!(err.contains("https"), "{err}");
        let unset = config(r#"{"client_id": "ci", "client_secret_env": "UNSET"}"#);
        let err = OAuth::new("t", "https://mcp.example/mcp", &unset, &env).unwrap_err();
        assert!(err.contains("`$UNSET` is not set"), "{err}");
        let browser = config(r#"{"clientId": "ci", "callbackPort": 8080}"#);
        assert_eq!(OAuth::new("t", "https://mcp.example/mcp", &browser, &env).unwrap_err(), OAUTH_NEEDS_CREDENTIALS);
        let key = config(r#"{"client_id": "ci", "private_key_env": "SECRET"}"#);
        let err = OAuth::new("t", "https://mcp.example/mcp", &key, &env).unwrap_err();
        assert!(err.contains("`$SECRET` cannot be used") && !err.contains("s3cret"), "{err}");
    }

    /// An authorization server on 127.0.0.1: its metadata at `/meta`, tokens at
    /// `/token` (`tok-1`, `tok-2`, ... valid for `lifetime` seconds; `bad` as client
    /// secret is refused). Returns its base URL and the token requests' bodies.
    async fn authorization_server(lifetime: u64) -> (String, Arc<Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (seen, issuer) = (requests.clone(), base.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                let mut buf = vec![0u8; 16384];
                let mut len = 0;
                // Headers, then the body its content-length says.
                let request = loop {
                    let n = stream.read(&mut buf[len..]).await.unwrap();
                    len += n;
                    let text = String::from_utf8_lossy(&buf[..len]).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let want = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap())
                            })
                            .unwrap_or(0);
                        if body.len() >= want || n == 0 {
                            break text;
                        }
                    }
                };
                let (status, body) = if request.starts_with("GET /meta") {
                    ("200 OK", format!(r#"{{"issuer": "{issuer}", "token_endpoint": "{issuer}/token"}}"#))
                } else {
                    let basic = request
                        .lines()
                        .find(|l| l.to_ascii_lowercase().starts_with("authorization: basic "))
                        .unwrap_or_default();
                    let pair = base64::engine::general_purpose::STANDARD
                        .decode(basic.rsplit(' ').next().unwrap())
                        .unwrap_or_default();
                    let form = request.split_once("\r\n\r\n").unwrap().1.to_string();
                    let n = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(form);
                        seen.len()
                    };
                    if pair == b"ci:bad" {
                        (
                            "401 Unauthorized",
                            r#"{"error": "invalid_client", "error_description": "bad secret"}"#.to_string(),
                        )
                    } else {
                        (
                            "200 OK",
                            format!(
                                r#"{{"access_token": "tok-{n}", "token_type": "Bearer", "expires_in": {lifetime}}}"#
                            ),
                        )
                    }
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            }
        });
        (base, requests)
    }

    fn client(base: &str, secret: &'static str) -> OAuth {
        let config = config(&format!(
            r#"{{"client_id": "ci", "client_secret_env": "S", "scopes": "read", "auth_server_metadata_url": "{base}/meta"}}"#
        ));
        OAuth::new("t", "http://127.0.0.1:9/mcp", &config, &move |_| Some(secret.to_string())).unwrap()
    }

    #[tokio::test]
    async fn tokens_are_renewed_before_they_expire_and_after_a_refusal() {
        let (base, requests) = authorization_server(1).await;
        let oauth = client(&base, "s3cret");
        assert_eq!(oauth.token().await.unwrap(), None, "no token before the server asks for one");
        let first = oauth.authorize("Bearer scope=\"ignored\"", None, false).await.unwrap();
        assert_eq!(first, "tok-1");
        {
            let seen = requests.lock().unwrap();
            assert!(seen[0].contains("grant_type=client_credentials") && seen[0].contains("scope=read"), "{}", seen[0]);
            assert!(seen[0].contains("resource=http%3A%2F%2F127.0.0.1%3A9%2Fmcp"), "{}", seen[0]);
            assert!(!seen[0].contains("s3cret"), "the secret goes in the Basic header, not the form");
        }
        assert_eq!(oauth.token().await.unwrap().as_deref(), Some("tok-1"));
        // Half of its 1 s lifetime later, it is renewed before being sent.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(oauth.token().await.unwrap().as_deref(), Some("tok-2"));
        // The server refused tok-2: a fresh one, once; a request that still holds the
        // refused one after that gets the fresh one without a new grant.
        assert_eq!(oauth.authorize("", Some("tok-2"), false).await.unwrap(), "tok-3");
        assert_eq!(oauth.authorize("", Some("tok-2"), false).await.unwrap(), "tok-3");
        assert_eq!(requests.lock().unwrap().len(), 3);
        // A step-up adds the scope the 403 names.
        assert_eq!(
            oauth.authorize("Bearer error=\"insufficient_scope\", scope=\"write\"", Some("tok-3"), true).await.unwrap(),
            "tok-4"
        );
        assert!(requests.lock().unwrap()[3].contains("scope=read+write"));
        assert!(oauth.failure().is_none());
    }

    #[tokio::test]
    async fn a_refused_grant_says_what_to_check_without_the_secret() {
        let (base, _) = authorization_server(3600).await;
        let oauth = client(&base, "bad");
        let why = oauth.authorize("", None, false).await.unwrap_err();
        assert!(why.contains("invalid_client (bad secret)") && why.contains("`$S`") && why.contains("`ci`"), "{why}");
        assert!(!why.contains("tok-"), "{why}");
        assert_eq!(oauth.failure().as_deref(), Some(why.as_str()));
    }

    #[test]
    fn messages_are_one_short_line() {
        assert_eq!(one_line("a\n  b\tc"), "a b c");
        assert_eq!(one_line(&"x".repeat(500)).chars().count(), MAX_DESCRIPTION + 1);
        assert_eq!(scope_list(" read  write read "), ["read", "write"]);
        assert_eq!(resource(&Url::parse("https://h.example/mcp#frag").unwrap()), "https://h.example/mcp");
    }
}
