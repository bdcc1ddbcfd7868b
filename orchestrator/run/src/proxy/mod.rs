//! The egress proxy: the one way out of a sandbox whose network is an allowlist.
//!
//! [`run::RunProxy`] is the run's instance: started when some agent or `setup:` has an
//! allowlist (`sandbox.network: {allow, deny}`), with one [`run::Grant`] per such agent.
//! Each sandbox reaches it on `127.0.0.1:<port>` inside its own network namespace,
//! through a listener the sandbox hands over (`orch_sandbox::egress`), served here
//! with [`EgressProxy::serve_listener`].
//!
//! One proxy serves a whole run. Each agent registers with its own policy and gets a
//! credential; its sandbox sees `HTTP(S)_PROXY=http://<agent>:<token>@<proxy>` and can
//! reach nothing else. The proxy speaks HTTP `CONNECT` (for HTTPS, checked against the
//! TLS SNI of the ClientHello, which is read but never terminated) and plain HTTP
//! forwarding (absolute-form requests). It resolves names itself, refuses names that
//! resolve to private addresses unless the policy names them, and reports every
//! decision with its byte counts.
//!
//! The one exception to "never terminated": a host the agent has a credential for
//! (`sandbox.network.credentials`). Its tunnels are intercepted ([`intercept`]) with a
//! certificate from the run's authority ([`credentials::Authority`]), so that the proxy
//! can add the credential the sandbox never sees.

pub mod credentials;
mod intercept;
pub mod policy;
pub mod run;
pub mod sni;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub use policy::{EgressPolicy, PolicyError, Verdict};

/// The largest request head the proxy reads.
const MAX_HEAD: usize = 16 * 1024;
/// The largest ClientHello prefix the proxy buffers before it must know the SNI.
const MAX_HELLO: usize = 64 * 1024;
/// How long a client has to send its request head or its ClientHello.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long connecting to the real server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// One decision of the proxy, for the agent's transcript and the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyEvent {
    pub agent: String,
    pub host: String,
    pub port: u16,
    /// `None` when allowed, else why not.
    pub denied: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Requests of the connection the proxy added a credential to (never its value).
    pub credentials: u64,
}

/// Where an agent's decisions go.
pub type EventSink = Arc<dyn Fn(ProxyEvent) + Send + Sync>;

/// How names are resolved: by the system, with test overrides taking precedence (like
/// curl's `--resolve`).
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    overrides: HashMap<String, Vec<IpAddr>>,
}

impl Resolver {
    /// Maps `host` to `addrs` instead of asking the system.
    pub fn with_override(mut self, host: &str, addrs: Vec<IpAddr>) -> Self {
        self.overrides.insert(policy::normalize(host), addrs);
        self
    }

    /// Parses `host:addr[,addr...]` pairs separated by `;` (the `ORCH_PROXY_RESOLVE`
    /// form, for tests).
    pub fn parse_overrides(mut self, text: &str) -> Result<Self, String> {
        for pair in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (host, addrs) =
                pair.split_once('=').ok_or_else(|| format!("`{pair}` is not host=address[,address]"))?;
            let addrs = addrs
                .split(',')
                .map(|a| a.trim().parse::<IpAddr>().map_err(|_| format!("`{a}` is not an IP address")))
                .collect::<Result<Vec<_>, _>>()?;
            self = self.with_override(host, addrs);
        }
        Ok(self)
    }

    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        if let Some(addrs) = self.overrides.get(&policy::normalize(host)) {
            return Ok(addrs.iter().map(|a| SocketAddr::new(*a, port)).collect());
        }
        if let Ok(addr) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(addr, port)]);
        }
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }
}

struct Agent {
    id: String,
    /// The user name of its credential: the id with what a URL's user part cannot hold
    /// replaced.
    user: String,
    policy: EgressPolicy,
    /// The hosts (exact name and port) the proxy adds a credential for.
    secrets: Vec<Arc<credentials::Secret>>,
    sink: EventSink,
}

impl Agent {
    fn secret_for(&self, host: &str, port: u16) -> Option<&Arc<credentials::Secret>> {
        let host = policy::normalize(host);
        self.secrets.iter().find(|s| s.host == host && s.port == port)
    }
}

struct Shared {
    agents: Mutex<HashMap<String, Arc<Agent>>>,
    resolver: Resolver,
    /// The run's certificate authority, made at the first credential.
    authority: std::sync::OnceLock<Arc<credentials::Authority>>,
}

/// A running proxy. Dropping it (or cancelling its token) stops accepting connections.
pub struct EgressProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

/// An agent's registration; unregisters on drop.
pub struct AgentProxy {
    token: String,
    url: String,
    shared: Arc<Shared>,
}

impl AgentProxy {
    /// The proxy URL with the agent's credential, for `HTTP_PROXY` and friends.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The environment a sandboxed process gets: upper and lower case forms.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
            env.push((name.to_string(), self.url.clone()));
            env.push((name.to_ascii_lowercase(), self.url.clone()));
        }
        env.push(("NO_PROXY".into(), String::new()));
        env.push(("no_proxy".into(), String::new()));
        env
    }
}

impl Drop for AgentProxy {
    fn drop(&mut self) {
        self.shared.agents.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.token);
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl EgressProxy {
    /// Listens on `bind` (port 0 picks a random port) and serves until dropped.
    pub async fn start(bind: SocketAddr, resolver: Resolver) -> std::io::Result<EgressProxy> {
        let listener = TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let shared =
            Arc::new(Shared { agents: Mutex::new(HashMap::new()), resolver, authority: std::sync::OnceLock::new() });
        let stop = CancellationToken::new();
        let (s, token) = (shared.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = token.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let s = s.clone();
                let token = token.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        () = token.cancelled() => {}
                        () = serve(stream, s) => {}
                    }
                });
            }
        });
        Ok(EgressProxy { addr, shared, stop })
    }

    /// Serves a connection that arrived some other way (a Unix-socket bridge).
    pub fn serve_stream<S>(&self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (shared, token) = (self.shared.clone(), self.stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = token.cancelled() => {}
                () = serve(stream, shared) => {}
            }
        });
    }

    /// Serves the connections that arrive on `listener` (a sandbox's, bound in its own
    /// network namespace) until the returned token is cancelled or the proxy stops.
    pub fn serve_listener(&self, listener: std::net::TcpListener) -> std::io::Result<CancellationToken> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let (shared, token) = (self.shared.clone(), self.stop.child_token());
        let stop = token.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = token.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let (shared, token) = (shared.clone(), token.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        () = token.cancelled() => {}
                        () = serve(stream, shared) => {}
                    }
                });
            }
        });
        Ok(stop)
    }

    /// Where the proxy listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The run's certificate authority, made on the first call.
    pub fn authority(&self) -> Result<Arc<credentials::Authority>, credentials::CredentialError> {
        if let Some(authority) = self.shared.authority.get() {
            return Ok(authority.clone());
        }
        let made = Arc::new(credentials::Authority::new()?);
        Ok(self.shared.authority.get_or_init(|| made).clone())
    }

    /// Registers an agent with its policy and the credentials the proxy adds for it;
    /// its decisions go to `sink`.
    pub fn register(
        &self,
        agent: &str,
        policy: EgressPolicy,
        secrets: Vec<Arc<credentials::Secret>>,
        sink: EventSink,
    ) -> AgentProxy {
        let token = random_token();
        let user = agent.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_', "-");
        let url = format!("http://{user}:{token}@{}", self.addr);
        let entry = Arc::new(Agent { id: agent.to_string(), user, policy, secrets, sink });
        self.shared.agents.lock().unwrap_or_else(PoisonError::into_inner).insert(token.clone(), entry);
        AgentProxy { token, url, shared: self.shared.clone() }
    }
}

/// 144 random bits, URL-safe: the per-agent credential.
fn random_token() -> String {
    let bytes: [u8; 18] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Serves one client connection.
async fn serve<S>(mut client: S, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok(Ok((head, rest))) = tokio::time::timeout(CLIENT_TIMEOUT, read_head(&mut client)).await else {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n").await;
        return;
    };
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    if !matches!(req.parse(&head), Ok(httparse::Status::Complete(_))) {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n").await;
        return;
    }
    let Some(agent) = authenticate(&req, &shared) else {
        let _ = client
            .write_all(
                b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"orch\"\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await;
        return;
    };
    let method = req.method.unwrap_or("");
    let target = req.path.unwrap_or("").to_string();
    if method.eq_ignore_ascii_case("CONNECT") {
        tunnel(client, &agent, &shared, &target, rest).await;
    } else if let Some((host, port, origin)) = absolute_form(&target) {
        let head = rewrite_head(&req, &origin);
        forward(client, &agent, &shared.resolver, &host, port, head, rest).await;
    } else {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n").await;
    }
}

/// Reads up to the end of the request head; returns the head and what followed it.
async fn read_head<S: AsyncRead + Unpin>(client: &mut S) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
    }
}

fn authenticate(req: &httparse::Request<'_, '_>, shared: &Shared) -> Option<Arc<Agent>> {
    let value = req.headers.iter().find(|h| h.name.eq_ignore_ascii_case("proxy-authorization"))?.value;
    let value = std::str::from_utf8(value).ok()?.trim();
    let encoded = value.strip_prefix("Basic ").or_else(|| value.strip_prefix("basic "))?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, token) = decoded.split_once(':')?;
    let agents = shared.agents.lock().unwrap_or_else(PoisonError::into_inner);
    let agent = agents.get(token)?;
    (user == agent.user).then(|| agent.clone())
}

/// `http://host[:port]/path` -> (host, port, `/path`).
fn absolute_form(target: &str) -> Option<(String, u16, String)> {
    let rest = target.strip_prefix("http://").or_else(|| target.strip_prefix("HTTP://"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    if authority.contains('@') {
        return None; // credentials in the URL: refuse rather than guess
    }
    let (host, port) = split_host_port(authority, 80)?;
    Some((host, port, path))
}

fn split_host_port(authority: &str, default_port: u16) -> Option<(String, u16)> {
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default_port,
            None => return None,
        };
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_string(), port.parse().ok()?)),
        None => Some((authority.to_string(), default_port)),
    }
    .filter(|(host, _)| !host.is_empty())
}

/// The request head in origin form, without proxy headers, asking to close afterwards.
fn rewrite_head(req: &httparse::Request<'_, '_>, origin: &str) -> Vec<u8> {
    let mut out = format!("{} {} HTTP/1.1\r\n", req.method.unwrap_or("GET"), origin).into_bytes();
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

fn report(agent: &Agent, host: &str, port: u16, denied: Option<String>, up: u64, down: u64) {
    (agent.sink)(ProxyEvent {
        agent: agent.id.clone(),
        host: host.to_string(),
        port,
        denied,
        bytes_up: up,
        bytes_down: down,
        credentials: 0,
    });
}

/// Decides on `host` and resolves it to the addresses the policy permits; on refusal
/// answers the client and reports why.
async fn resolve_allowed<S: AsyncWrite + Unpin>(
    client: &mut S,
    agent: &Agent,
    resolver: &Resolver,
    host: &str,
    port: u16,
) -> Option<Vec<SocketAddr>> {
    if let Verdict::Deny(reason) = agent.policy.decide(host) {
        refuse(client, agent, host, port, "403 Forbidden", reason).await;
        return None;
    }
    let addrs = match resolver.resolve(host, port).await {
        Ok(addrs) if !addrs.is_empty() => addrs,
        Ok(_) | Err(_) => {
            refuse(client, agent, host, port, "502 Bad Gateway", format!("cannot resolve `{host}`")).await;
            return None;
        }
    };
    let permitted: Vec<SocketAddr> = addrs.iter().copied().filter(|a| agent.policy.address_allowed(a.ip())).collect();
    if permitted.is_empty() {
        let reason = format!(
            "`{host}` resolves to {}, a private address the allowlist does not name",
            addrs.first().map(|a| a.ip().to_string()).unwrap_or_default()
        );
        refuse(client, agent, host, port, "403 Forbidden", reason).await;
        return None;
    }
    Some(permitted)
}

/// Connects to the first address that answers.
async fn connect_any(addrs: &[SocketAddr]) -> Option<TcpStream> {
    for addr in addrs {
        if let Ok(Ok(stream)) = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            let _ = stream.set_nodelay(true);
            return Some(stream);
        }
    }
    None
}

async fn refuse<S: AsyncWrite + Unpin>(
    client: &mut S,
    agent: &Agent,
    host: &str,
    port: u16,
    status: &str,
    reason: String,
) {
    let body = format!("orch egress proxy: {reason}\n");
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = client.write_all(head.as_bytes()).await;
    let _ = client.write_all(body.as_bytes()).await;
    report(agent, host, port, Some(reason), 0, 0);
}

async fn tunnel<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut client: S,
    agent: &Arc<Agent>,
    shared: &Shared,
    target: &str,
    mut early: Vec<u8>,
) {
    let Some((host, port)) = split_host_port(target, 443) else {
        let _ = client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n").await;
        return;
    };
    let Some(addrs) = resolve_allowed(&mut client, agent, &shared.resolver, &host, port).await else { return };
    if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
        return;
    }
    // Read the ClientHello (if TLS) and hold the tunnel to the name it asks for.
    let hello = tokio::time::timeout(CLIENT_TIMEOUT, async {
        loop {
            match sni::inspect(&early) {
                sni::Hello::Incomplete if early.len() < MAX_HELLO => {}
                other => return other,
            }
            let mut chunk = [0u8; 4096];
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return sni::Hello::Incomplete,
                Ok(n) => early.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .unwrap_or(sni::Hello::Incomplete);
    let is_tls = matches!(hello, sni::Hello::Tls(_));
    let refusal = match hello {
        sni::Hello::Tls(Some(name)) if policy::normalize(&name) == policy::normalize(&host) => None,
        sni::Hello::Tls(Some(name)) => Some(format!("TLS server name `{name}` differs from the CONNECT host `{host}`")),
        sni::Hello::Tls(None) => Some(format!("TLS ClientHello for `{host}` names no server (SNI)")),
        sni::Hello::Malformed(e) => Some(format!("unreadable TLS ClientHello: {e}")),
        sni::Hello::Incomplete => Some("the client sent no complete request through the tunnel".into()),
        sni::Hello::NotTls => None,
    };
    if let Some(reason) = refusal {
        report(agent, &host, port, Some(reason), 0, 0);
        return;
    }
    // A host with a credential: TLS ends here, and the proxy adds the credential.
    if let Some(secret) = agent.secret_for(&host, port).filter(|_| is_tls) {
        let Some(authority) = shared.authority.get() else {
            report(agent, &host, port, Some("the run has no certificate authority".into()), 0, 0);
            return;
        };
        intercept::serve(client, early, agent.clone(), addrs, secret.clone(), authority.clone()).await;
        return;
    }
    // Only now, with the name checked, is the real server contacted.
    let Some(mut upstream) = connect_any(&addrs).await else {
        report(agent, &host, port, Some(format!("cannot connect to `{host}:{port}`")), 0, 0);
        return;
    };
    if upstream.write_all(&early).await.is_err() {
        report(agent, &host, port, Some("the server closed the connection".into()), 0, 0);
        return;
    }
    let (up, down) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await.unwrap_or((0, 0));
    report(agent, &host, port, None, up + early.len() as u64, down);
}

async fn forward<S: AsyncRead + AsyncWrite + Unpin>(
    mut client: S,
    agent: &Agent,
    resolver: &Resolver,
    host: &str,
    port: u16,
    head: Vec<u8>,
    early: Vec<u8>,
) {
    let Some(addrs) = resolve_allowed(&mut client, agent, resolver, host, port).await else { return };
    let Some(mut upstream) = connect_any(&addrs).await else {
        refuse(&mut client, agent, host, port, "502 Bad Gateway", format!("cannot connect to `{host}:{port}`")).await;
        return;
    };
    if upstream.write_all(&head).await.is_err() || upstream.write_all(&early).await.is_err() {
        report(agent, host, port, Some("the server closed the connection".into()), 0, 0);
        return;
    }
    let (up, down) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await.unwrap_or((0, 0));
    report(agent, host, port, None, up + (head.len() + early.len()) as u64, down);
}
