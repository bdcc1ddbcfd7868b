//! The egress proxy against local servers: names, credentials, SNI and private addresses.
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use orch_run::proxy::{EgressPolicy, EgressProxy, ProxyEvent, Resolver};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A server on loopback that answers every connection with a fixed HTTP response and
/// records what it received.
async fn upstream() -> (SocketAddr, Arc<Mutex<Vec<Vec<u8>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let log = log.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = tokio::time::timeout(std::time::Duration::from_secs(2), s.read(&mut buf))
                    .await
                    .unwrap_or(Ok(0))
                    .unwrap_or(0);
                log.lock().unwrap().push(buf[..n].to_vec());
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello").await;
            });
        }
    });
    (addr, seen)
}

struct Setup {
    proxy: EgressProxy,
    agent: orch_run::proxy::AgentProxy,
    events: Arc<Mutex<Vec<ProxyEvent>>>,
    up: SocketAddr,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

async fn setup() -> Setup {
    let (up, seen) = upstream().await;
    let resolver = Resolver::default()
        .with_override("allowed.test", vec![IpAddr::from([127, 0, 0, 1])])
        .with_override("denied.test", vec![IpAddr::from([127, 0, 0, 1])])
        .with_override("rebind.test", vec![IpAddr::from([127, 0, 0, 2])]);
    let proxy = EgressProxy::start("127.0.0.1:0".parse().unwrap(), resolver).await.unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = events.clone();
    let policy = EgressPolicy::new(&["allowed.test", "rebind.test", "127.0.0.1"], &["denied.test"]).unwrap();
    let agent = proxy.register("fix/a", policy, Vec::new(), Arc::new(move |e| sink.lock().unwrap().push(e)));
    Setup { proxy, agent, events, up, seen }
}

fn auth(url: &str) -> String {
    let creds = url.trim_start_matches("http://").split('@').next().unwrap();
    format!("Proxy-Authorization: Basic {}\r\n", base64::engine::general_purpose::STANDARD.encode(creds))
}

async fn exchange(proxy: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn plain_http_to_an_allowed_name_is_forwarded_in_origin_form() {
    let s = setup().await;
    let req = format!(
        "GET http://allowed.test:{}/x HTTP/1.1\r\nHost: allowed.test\r\n{}\r\n",
        s.up.port(),
        auth(s.agent.url())
    );
    let answer = exchange(s.proxy.addr(), req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("hello"));
    let got = String::from_utf8_lossy(&s.seen.lock().unwrap()[0]).into_owned();
    assert!(got.starts_with("GET /x HTTP/1.1\r\n"), "{got}");
    assert!(!got.to_ascii_lowercase().contains("proxy-authorization"), "the credential must not leave the proxy");
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let events = s.events.lock().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!((events[0].host.as_str(), events[0].denied.as_ref()), ("allowed.test", None));
    assert!(events[0].bytes_down > 0);
}

#[tokio::test]
async fn denied_and_unlisted_names_get_403_and_reach_nothing() {
    let s = setup().await;
    for host in ["denied.test", "elsewhere.test"] {
        let req = format!("CONNECT {host}:{} HTTP/1.1\r\n{}\r\n", s.up.port(), auth(s.agent.url()));
        let answer = exchange(s.proxy.addr(), req.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    }
    assert!(s.seen.lock().unwrap().is_empty(), "no byte may reach the server");
    assert_eq!(s.events.lock().unwrap().iter().filter(|e| e.denied.is_some()).count(), 2);
}

#[tokio::test]
async fn without_the_agent_credential_the_proxy_answers_407() {
    let s = setup().await;
    for creds in ["", "Proxy-Authorization: Basic Zm9vOmJhcg==\r\n"] {
        let req = format!("CONNECT allowed.test:{} HTTP/1.1\r\n{creds}\r\n", s.up.port());
        let answer = exchange(s.proxy.addr(), req.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");
    }
    // A valid token under another agent's name is refused too.
    let token = s.agent.url().split(':').nth(2).unwrap().split('@').next().unwrap().to_string();
    let forged = format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(format!("other:{token}"))
    );
    let answer = exchange(s.proxy.addr(), format!("CONNECT allowed.test:1 HTTP/1.1\r\n{forged}\r\n").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");
    assert!(s.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_name_that_resolves_to_an_unlisted_private_address_is_refused() {
    let s = setup().await;
    let req = format!("CONNECT rebind.test:{} HTTP/1.1\r\n{}\r\n", s.up.port(), auth(s.agent.url()));
    let answer = exchange(s.proxy.addr(), req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("private address"));
}

fn client_hello(name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(config), server).unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out
}

#[tokio::test]
async fn connect_passes_a_matching_client_hello_and_refuses_a_different_sni() {
    let s = setup().await;
    // Matching SNI: the ClientHello reaches the server unchanged.
    let hello = client_hello("allowed.test");
    let mut req = format!("CONNECT allowed.test:{} HTTP/1.1\r\n{}\r\n", s.up.port(), auth(s.agent.url())).into_bytes();
    req.extend_from_slice(&hello);
    let answer = exchange(s.proxy.addr(), &req).await;
    assert!(answer.starts_with("HTTP/1.1 200 Connection established"), "{answer}");
    assert_eq!(s.seen.lock().unwrap().first().map(|b| b.as_slice()), Some(hello.as_slice()));

    // SNI of another host through a CONNECT to the allowed one: nothing reaches the server.
    let mut req = format!("CONNECT allowed.test:{} HTTP/1.1\r\n{}\r\n", s.up.port(), auth(s.agent.url())).into_bytes();
    req.extend_from_slice(&client_hello("evil.example"));
    let answer = exchange(s.proxy.addr(), &req).await;
    assert!(!answer.contains("hello"), "{answer}");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert_eq!(s.seen.lock().unwrap().len(), 1, "the mismatched hello must not be forwarded");
    let events = s.events.lock().unwrap();
    assert!(events.iter().any(|e| e.denied.as_deref().is_some_and(|d| d.contains("evil.example"))), "{events:?}");
}

#[tokio::test]
async fn an_unregistered_agent_loses_access() {
    let s = setup().await;
    let header = auth(s.agent.url());
    drop(s.agent);
    let req = format!("CONNECT allowed.test:{} HTTP/1.1\r\n{header}\r\n", s.up.port());
    let answer = exchange(s.proxy.addr(), req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");
}
