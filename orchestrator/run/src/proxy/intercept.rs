//! The one place the proxy terminates TLS: a `CONNECT` to a host the agent has a
//! credential for (exact name and port). The proxy answers the sandbox's handshake with
//! a certificate from the run's authority, opens its own TLS connection to the real
//! server (verified against the system's roots or the credential's CA), and relays
//! HTTP/1.1 requests between them, each one:
//!
//! - refused unless it is for that host (the `Host` header and an absolute-form target
//!   must name it, with its port);
//! - stripped of the `Authorization` and `Proxy-Authorization` the sandbox sent, and
//!   given the credential's;
//! - asked for an uncompressed answer, whose headers and body are then searched for the
//!   secret's forms, each replaced by as many `*` (a server that reflects request headers
//!   hands nothing back); a compressed answer, which could hide it, is refused.
//!
//! Redirects are the client's business: the next request goes through the proxy again,
//! and a credential is added only for its own host.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::credentials::{Authority, Secret};
use super::{Agent, CLIENT_TIMEOUT, ProxyEvent, connect_any, policy};

type UpBody = http_body_util::combinators::UnsyncBoxBody<Bytes, hyper::Error>;
type DownBody = http_body_util::combinators::UnsyncBoxBody<Bytes, hyper::Error>;

/// What one intercepted connection did, for its [`ProxyEvent`].
#[derive(Default)]
struct Counters {
    up: AtomicU64,
    down: Arc<AtomicU64>,
    credentials: AtomicU64,
}

/// Serves an intercepted `CONNECT` tunnel; `early` is what the client sent after the
/// `CONNECT` (its ClientHello, so far).
pub(super) async fn serve<S>(
    client: S,
    early: Vec<u8>,
    agent: Arc<Agent>,
    addrs: Vec<SocketAddr>,
    secret: Arc<Secret>,
    authority: Arc<Authority>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (host, port) = (secret.host.clone(), secret.port);
    let deny = |reason: String| super::report(&agent, &host, port, Some(reason), 0, 0);
    let config = match authority.server_config(&host) {
        Ok(config) => config,
        Err(e) => return deny(e.to_string()),
    };
    let accept = tokio_rustls::TlsAcceptor::from(config).accept(Prefixed { early, at: 0, inner: client });
    let mut tls = match tokio::time::timeout(CLIENT_TIMEOUT, accept).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            return deny(format!(
                "the client refused orch's certificate for `{host}` ({e}); it must trust the run's CA bundle ($SSL_CERT_FILE)"
            ));
        }
        Err(_) => return deny(format!("the client did not finish its TLS handshake for `{host}`")),
    };
    let upstream = match connect_upstream(&addrs, &host, &secret).await {
        Ok(upstream) => upstream,
        Err(reason) => {
            super::refuse(&mut tls, &agent, &host, port, "502 Bad Gateway", reason).await;
            let _ = tls.shutdown().await;
            return;
        }
    };
    let counters = Arc::new(Counters::default());
    let ctx = Arc::new(Ctx {
        agent: agent.clone(),
        secret: secret.clone(),
        addrs,
        upstream: tokio::sync::Mutex::new(Some(upstream)),
        counters: counters.clone(),
    });
    let service = {
        let ctx = ctx.clone();
        hyper::service::service_fn(move |req| handle(req, ctx.clone()))
    };
    let served = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
    if let Some((_, conn)) = ctx.upstream.lock().await.take() {
        conn.abort();
    }
    if let Err(e) = served {
        tracing::debug!(host = %host, "intercepted connection ended: {e}");
    }
    (agent.sink)(ProxyEvent {
        agent: agent.id.clone(),
        host: host.clone(),
        port,
        denied: None,
        bytes_up: counters.up.load(Ordering::Relaxed),
        bytes_down: counters.down.load(Ordering::Relaxed),
        credentials: counters.credentials.load(Ordering::Relaxed),
    });
}

type Upstream = (hyper::client::conn::http1::SendRequest<UpBody>, tokio::task::JoinHandle<()>);

/// Connects to the real server, verifies it, and opens an HTTP/1.1 client on it.
async fn connect_upstream(addrs: &[SocketAddr], host: &str, secret: &Secret) -> Result<Upstream, String> {
    let tcp = connect_any(addrs).await.ok_or_else(|| format!("cannot connect to `{host}:{}`", secret.port))?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|_| format!("`{host}` is not a TLS server name"))?;
    let tls = tokio::time::timeout(
        super::CONNECT_TIMEOUT,
        tokio_rustls::TlsConnector::from(secret.upstream.clone()).connect(name, tcp),
    )
    .await
    .map_err(|_| format!("`{host}` did not finish its TLS handshake"))?
    .map_err(|e| format!("cannot verify `{host}` ({e}); the credential is not sent"))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| format!("cannot speak HTTP/1.1 to `{host}`: {e}"))?;
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((sender, conn))
}

struct Ctx {
    agent: Arc<Agent>,
    secret: Arc<Secret>,
    addrs: Vec<SocketAddr>,
    /// The connection to the real server; made again when the server closed it
    /// between two requests of the client's connection.
    upstream: tokio::sync::Mutex<Option<Upstream>>,
    counters: Arc<Counters>,
}

/// Request and response headers that belong to one hop, never relayed.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authenticate",
];

async fn handle(req: Request<Incoming>, ctx: Arc<Ctx>) -> Result<Response<DownBody>, Infallible> {
    let (host, port) = (ctx.secret.host.as_str(), ctx.secret.port);
    if let Err((named, reason)) = check_target(&req, host, port) {
        super::report(&ctx.agent, &named, port, Some(reason.clone()), 0, 0);
        return Ok(text(StatusCode::MISDIRECTED_REQUEST, &reason));
    }
    if req.method() == hyper::Method::CONNECT {
        let reason = format!("a CONNECT inside the tunnel to `{host}`");
        super::report(&ctx.agent, host, port, Some(reason.clone()), 0, 0);
        return Ok(text(StatusCode::METHOD_NOT_ALLOWED, &reason));
    }
    let (mut parts, body) = req.into_parts();
    let origin = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    parts.uri = match origin.parse() {
        Ok(uri) => uri,
        Err(_) => return Ok(text(StatusCode::BAD_REQUEST, "unreadable request target")),
    };
    strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::AUTHORIZATION);
    parts.headers.remove(header::PROXY_AUTHORIZATION);
    let Ok(mut credential) = HeaderValue::from_str(ctx.secret.authorization()) else {
        return Ok(text(StatusCode::BAD_GATEWAY, "the credential is not a valid header value"));
    };
    credential.set_sensitive(true);
    parts.headers.insert(header::AUTHORIZATION, credential);
    parts.headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    let authority = if port == 443 { host.to_string() } else { format!("{host}:{port}") };
    if let Ok(value) = HeaderValue::from_str(&authority) {
        parts.headers.insert(header::HOST, value);
    }
    let counters = ctx.counters.clone();
    let body = body
        .map_frame(move |frame| {
            if let Some(data) = frame.data_ref() {
                counters.up.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            frame
        })
        .boxed_unsync();
    let answer = {
        let mut upstream = ctx.upstream.lock().await;
        let usable = match upstream.as_mut() {
            Some((sender, _)) => sender.ready().await.is_ok(),
            None => false,
        };
        if !usable {
            if let Some((_, conn)) = upstream.take() {
                conn.abort();
            }
            match connect_upstream(&ctx.addrs, host, &ctx.secret).await {
                Ok(fresh) => *upstream = Some(fresh),
                Err(reason) => {
                    super::report(&ctx.agent, host, port, Some(reason.clone()), 0, 0);
                    return Ok(text(StatusCode::BAD_GATEWAY, &reason));
                }
            }
        }
        let Some((sender, _)) = upstream.as_mut() else {
            return Ok(text(StatusCode::BAD_GATEWAY, &format!("no connection to `{host}`")));
        };
        ctx.counters.credentials.fetch_add(1, Ordering::Relaxed);
        sender.send_request(Request::from_parts(parts, body)).await
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => return Ok(text(StatusCode::BAD_GATEWAY, &format!("`{host}` did not answer: {e}"))),
    };
    let (mut parts, body) = answer.into_parts();
    if let Some(encoding) = parts.headers.get(header::CONTENT_ENCODING)
        && !encoding.as_bytes().eq_ignore_ascii_case(b"identity")
    {
        let reason = format!(
            "`{host}` answered with Content-Encoding `{}` although asked for none: orch cannot check it for the credential",
            String::from_utf8_lossy(encoding.as_bytes())
        );
        super::report(&ctx.agent, host, port, Some(reason.clone()), 0, 0);
        return Ok(text(StatusCode::BAD_GATEWAY, &reason));
    }
    strip_hop_by_hop(&mut parts.headers);
    redact_headers(&mut parts.headers, ctx.secret.redactions());
    let body = Redacting {
        inner: body,
        secret: ctx.secret.clone(),
        held: Vec::new(),
        done: false,
        down: ctx.counters.down.clone(),
    };
    Ok(Response::from_parts(parts, body.boxed_unsync()))
}

/// The request must be for the tunnel's host and port: its `Host` header, and its
/// target when in absolute form. `Err` holds the name it asked for and why not.
fn check_target<B>(req: &Request<B>, host: &str, port: u16) -> Result<(), (String, String)> {
    let refuse = |named: &str, port_named: u16| {
        Err((named.to_string(), format!("a request for `{named}:{port_named}` inside the tunnel to `{host}:{port}`")))
    };
    if let Some(authority) = req.uri().authority() {
        let default = if req.uri().scheme_str() == Some("http") { 80 } else { 443 };
        let named_port = authority.port_u16().unwrap_or(default);
        if policy::normalize(authority.host()) != host || named_port != port {
            return refuse(authority.host(), named_port);
        }
    }
    let Some(value) = req.headers().get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return Err((host.to_string(), format!("a request without a Host header inside the tunnel to `{host}`")));
    };
    let (named, named_port) = super::split_host_port(value.trim(), 443).unwrap_or((value.to_string(), 0));
    if policy::normalize(&named) != host || named_port != port {
        return refuse(&named, named_port);
    }
    if req.headers().get_all(header::HOST).iter().count() > 1 {
        return Err((host.to_string(), "a request with two Host headers".into()));
    }
    Ok(())
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The names `Connection` lists are hop-by-hop too.
    let listed: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|n| n.trim().to_ascii_lowercase()).collect::<Vec<_>>())
        .filter_map(|n| HeaderName::from_bytes(n.as_bytes()).ok())
        .collect();
    for name in listed {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

fn redact_headers(headers: &mut HeaderMap, redactions: &[Vec<u8>]) {
    for value in headers.values_mut() {
        let mut bytes = value.as_bytes().to_vec();
        if redact(&mut bytes, redactions)
            && let Ok(clean) = HeaderValue::from_bytes(&bytes)
        {
            *value = clean;
        }
    }
}

/// Replaces every occurrence of each of `redactions` in `bytes` by as many `*`; whether
/// anything was replaced.
pub(super) fn redact(bytes: &mut [u8], redactions: &[Vec<u8>]) -> bool {
    let mut found = false;
    for pattern in redactions {
        let hits: Vec<usize> = memchr::memmem::find_iter(bytes, pattern).collect();
        for at in hits {
            bytes[at..at + pattern.len()].fill(b'*');
            found = true;
        }
    }
    found
}

/// A response body with the secret's forms redacted. It holds back the last bytes that
/// could begin a form cut across two frames.
struct Redacting<B> {
    inner: B,
    secret: Arc<Secret>,
    held: Vec<u8>,
    done: bool,
    down: Arc<AtomicU64>,
}

impl<B: Body<Data = Bytes> + Unpin> Body for Redacting<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let keep = this.secret.redactions().first().map_or(0, |r| r.len().saturating_sub(1));
        loop {
            if this.done {
                if this.held.is_empty() {
                    return Poll::Ready(None);
                }
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(std::mem::take(&mut this.held))))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => {
                    redact(&mut this.held, this.secret.redactions());
                    this.done = true;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => {
                    // Trailers are dropped: they could carry the secret too.
                    let Ok(data) = frame.into_data() else { continue };
                    this.down.fetch_add(data.len() as u64, Ordering::Relaxed);
                    this.held.extend_from_slice(&data);
                    redact(&mut this.held, this.secret.redactions());
                    if this.held.len() > keep {
                        let tail = this.held.split_off(this.held.len() - keep);
                        let out = std::mem::replace(&mut this.held, tail);
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.held.is_empty()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        // Redaction keeps the length: what is left upstream plus what is held.
        let inner = self.inner.size_hint();
        let held = self.held.len() as u64;
        let mut hint = hyper::body::SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(held));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}

/// A short plain-text answer from the proxy itself.
fn text(status: StatusCode, reason: &str) -> Response<DownBody> {
    let body = http_body_util::Full::new(Bytes::from(format!("orch egress proxy: {reason}\n")))
        .map_err(|never| match never {})
        .boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

/// A stream that first yields `early` (bytes already read from `inner`), then `inner`.
struct Prefixed<S> {
    early: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.early.len() {
            let n = buf.remaining().min(this.early.len() - this.at);
            buf.put_slice(&this.early[this.at..this.at + n]);
            this.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_keeps_the_length_and_catches_every_form() {
        let forms = vec![b"dXNlcjpzM2NyZXQtdG9rZW4".to_vec(), b"s3cret-token".to_vec()];
        let mut text = b"Authorization: Basic dXNlcjpzM2NyZXQtdG9rZW4=, token s3cret-token.".to_vec();
        let len = text.len();
        assert!(redact(&mut text, &forms));
        assert_eq!(text.len(), len);
        let text = String::from_utf8(text).unwrap();
        assert!(!text.contains("s3cret") && !text.contains("dXNlcjpz"), "{text}");
        let mut clean = b"nothing here".to_vec();
        assert!(!redact(&mut clean, &forms));
    }

    /// A secret cut across frames is still redacted, and nothing else changes.
    #[tokio::test]
    async fn a_secret_split_across_frames_is_redacted() {
        let secret = Arc::new(
            Secret::new("api.example.test", 443, orch_types::CredentialKind::Bearer, "tok-0123456789", "T", None)
                .unwrap(),
        );
        let text = b"head tok-0123456789 middle tok-0123456789 tail".to_vec();
        for cut in 1..text.len() {
            let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
                Ok(Frame::data(Bytes::copy_from_slice(&text[..cut]))),
                Ok(Frame::data(Bytes::copy_from_slice(&text[cut..]))),
            ];
            let inner = http_body_util::StreamBody::new(futures::stream::iter(frames));
            let body =
                Redacting { inner, secret: secret.clone(), held: Vec::new(), done: false, down: Default::default() };
            let out = body.collect().await.unwrap().to_bytes();
            assert_eq!(out.len(), text.len(), "cut at {cut}");
            assert_eq!(&out[..], b"head ************** middle ************** tail", "cut at {cut}");
        }
    }

    #[test]
    fn a_request_for_another_host_is_refused() {
        let req = |target: &str, host: &str| Request::builder().uri(target).header("host", host).body(()).unwrap();
        assert!(check_target(&req("/x", "git.example.test"), "git.example.test", 443).is_ok());
        assert!(check_target(&req("/x", "GIT.example.test:443"), "git.example.test", 443).is_ok());
        assert!(check_target(&req("/x", "other.example.test"), "git.example.test", 443).is_err());
        assert!(check_target(&req("/x", "git.example.test:8443"), "git.example.test", 443).is_err());
        assert!(
            check_target(&req("https://other.example.test/x", "git.example.test"), "git.example.test", 443).is_err()
        );
        assert!(check_target(&req("http://git.example.test/x", "git.example.test"), "git.example.test", 443).is_err());
        let none = Request::builder().uri("/x").body(()).unwrap();
        assert!(check_target(&none, "git.example.test", 443).is_err());
    }
}
