//! The egress proxy's cost (issue 20): added latency per HTTPS request, and memory with
//! many tunnels open.
//!
//! ```text
//! cargo bench -p orch-run --bench proxy -- [REQUESTS] [TUNNELS]
//! ```
//! (`tests/bench/proxy.sh` runs it; defaults 1000 requests, 500 tunnels.)
//!
//! - **Latency**: a local HTTPS server (rustls, a self-signed certificate made by the
//!   `openssl` CLI) answers every request with 1 KiB. REQUESTS times each, alternating:
//!   direct (TCP connect, TLS handshake, request, whole response) and through the proxy
//!   (TCP connect to the proxy, `CONNECT` with the agent's credential, then the same
//!   over the tunnel: the proxy checks the SNI and splices). Medians and the difference,
//!   the figure the issue asks for (< 1 ms). A third series goes through the proxy to
//!   a host with a credential (issue 30): the proxy ends the client's TLS with the
//!   run's authority, verifies the server on its own connection, adds the header and
//!   redacts the answer; its median against the passed-through one is the cost of
//!   interception.
//! - **Memory**: TUNNELS tunnels are opened through the proxy and held (each past its
//!   TLS handshake); the process's RSS (`VmRSS`) before and while they are open. The
//!   clients and the server run in the same process, so the delta is an upper bound on
//!   the proxy's own share (each tunnel also costs a client and a server connection).
//!
//! Runs on a multi-thread tokio runtime with 2 workers; clients are blocking threads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use orch_run::proxy::{EgressPolicy, EgressProxy, Resolver};

fn main() {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let requests: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let tunnels: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(500);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (server_config, client_config) = tls_configs(dir.path());
    let cert = dir.path().join("cert.pem");
    let upstream = start_server(server_config);

    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime");
    let (proxy, credential, intercepted_credential, intercept_config) = runtime.block_on(async {
        let resolver = Resolver::default().with_override("bench.test", vec![upstream.ip()]);
        let proxy = EgressProxy::start("127.0.0.1:0".parse().expect("an address"), resolver).await.expect("the proxy");
        let policy = EgressPolicy::new(&["bench.test", "127.0.0.1"], &[] as &[&str]).expect("a policy");
        let agent = proxy.register("bench", policy, Vec::new(), Arc::new(|_| {}));
        let url = agent.url().to_string();
        std::mem::forget(agent); // registered for the whole bench
        let secret = orch_run::proxy::credentials::Secret::new(
            "bench.test",
            upstream.port(),
            orch_types::CredentialKind::Bearer,
            "bench-secret-token",
            "ORCH_BENCH_TOKEN",
            Some((&cert, "cert.pem")),
        )
        .expect("a credential");
        let policy = EgressPolicy::new(&["bench.test", "127.0.0.1"], &[] as &[&str]).expect("a policy");
        let intercepted = proxy.register("bench-cred", policy, vec![Arc::new(secret)], Arc::new(|_| {}));
        let intercepted_url = intercepted.url().to_string();
        std::mem::forget(intercepted);
        let authority = proxy.authority().expect("the run's authority");
        (proxy, url, intercepted_url, trusting(authority.certificate_pem()))
    });
    let auth_of = |url: &str| {
        let creds = url.trim_start_matches("http://").split('@').next().unwrap_or_default().to_string();
        base64::engine::general_purpose::STANDARD.encode(creds)
    };
    let intercepted_auth = auth_of(&intercepted_credential);
    let creds = credential.trim_start_matches("http://").split('@').next().unwrap_or_default().to_string();
    let auth = base64::engine::general_purpose::STANDARD.encode(creds);
    let proxy_addr = proxy.addr();

    let mut direct = Vec::with_capacity(requests);
    let mut proxied = Vec::with_capacity(requests);
    let mut intercepted = Vec::with_capacity(requests);
    for _ in 0..20 {
        fetch(&client_config, upstream, None);
        fetch(&client_config, proxy_addr, Some((&auth, upstream.port())));
        fetch(&intercept_config, proxy_addr, Some((&intercepted_auth, upstream.port())));
    }
    for _ in 0..requests {
        direct.push(fetch(&client_config, upstream, None));
        proxied.push(fetch(&client_config, proxy_addr, Some((&auth, upstream.port()))));
        intercepted.push(fetch(&intercept_config, proxy_addr, Some((&intercepted_auth, upstream.port()))));
    }
    let (d, p, i) = (median(&mut direct), median(&mut proxied), median(&mut intercepted));
    println!("| requests | direct median | through the proxy median | added |");
    println!("|---|---|---|---|");
    println!("| {requests} | {:.3} ms | {:.3} ms | {:.3} ms |", ms(d), ms(p), ms(p.saturating_sub(d)));
    println!();
    println!("| requests | passed through median | intercepted, credential added, median | added by interception |");
    println!("|---|---|---|---|");
    println!("| {requests} | {:.3} ms | {:.3} ms | {:.3} ms |", ms(p), ms(i), ms(i.saturating_sub(p)));

    let before = rss_kib();
    let mut open = Vec::with_capacity(tunnels);
    for _ in 0..tunnels {
        open.push(open_tunnel(&client_config, proxy_addr, &auth, upstream.port()));
    }
    std::thread::sleep(Duration::from_millis(200));
    let during = rss_kib();
    println!();
    println!("| tunnels held | RSS before | RSS with the tunnels | delta (upper bound for the proxy) |");
    println!("|---|---|---|---|");
    println!(
        "| {tunnels} | {:.1} MiB | {:.1} MiB | {:.1} MiB |",
        before as f64 / 1024.0,
        during as f64 / 1024.0,
        during.saturating_sub(before) as f64 / 1024.0
    );
    drop(open);
    drop(proxy);
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Connects (through the proxy when `via` is given) and completes the TLS handshake.
fn connect(config: &Arc<rustls::ClientConfig>, addr: SocketAddr, via: Option<(&str, u16)>) -> Tls {
    let mut tcp = TcpStream::connect(addr).expect("a connection");
    tcp.set_nodelay(true).expect("nodelay");
    if let Some((auth, port)) = via {
        let req = format!("CONNECT bench.test:{port} HTTP/1.1\r\nProxy-Authorization: Basic {auth}\r\n\r\n");
        tcp.write_all(req.as_bytes()).expect("a CONNECT");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            tcp.read_exact(&mut byte).expect("the proxy's answer");
            head.push(byte[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    }
    let name = rustls::pki_types::ServerName::try_from("bench.test").expect("a name");
    let conn = rustls::ClientConnection::new(config.clone(), name).expect("a TLS client");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).expect("the TLS handshake");
    }
    tls
}

/// One request, timed from connect to the last byte of the 1 KiB answer.
fn fetch(config: &Arc<rustls::ClientConfig>, addr: SocketAddr, via: Option<(&str, u16)>) -> Duration {
    let at = Instant::now();
    let port = via.map_or(addr.port(), |(_, port)| port);
    let mut tls = connect(config, addr, via);
    let request = format!("GET / HTTP/1.1\r\nHost: bench.test:{port}\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).expect("a request");
    let mut body = Vec::new();
    let _ = tls.read_to_end(&mut body);
    assert!(body.len() >= 1024, "a short answer: {} bytes", body.len());
    at.elapsed()
}

fn open_tunnel(config: &Arc<rustls::ClientConfig>, proxy: SocketAddr, auth: &str, port: u16) -> Tls {
    connect(config, proxy, Some((auth, port)))
}

/// An HTTPS server answering 1 KiB to every request, one thread per connection.
fn start_server(config: Arc<rustls::ServerConfig>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a listener");
    let addr = listener.local_addr().expect("its address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let config = config.clone();
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let Ok(conn) = rustls::ServerConnection::new(config) else { return };
                let mut tls = rustls::StreamOwned::new(conn, stream);
                let mut buf = [0u8; 4096];
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let body = [b'x'; 1024];
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                let _ = tls.write_all(head.as_bytes());
                let _ = tls.write_all(&body);
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    addr
}

/// A client that trusts only the PEM certificate `pem` (the proxy's authority).
fn trusting(pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
        roots.add(cert.expect("a certificate")).expect("a root");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// The server's self-signed certificate (openssl CLI) and a client that trusts it.
fn tls_configs(dir: &std::path::Path) -> (Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>) {
    use rustls::pki_types::pem::PemObject;
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=bench.test", "-addext", "subjectAltName=DNS:bench.test"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("the openssl CLI");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    let certs: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(&cert)
        .expect("the certificate")
        .collect::<Result<_, _>>()
        .expect("the certificate");
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).expect("the key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs.clone(), key)
        .expect("a server config");
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots.add(c).expect("a root");
    }
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}
