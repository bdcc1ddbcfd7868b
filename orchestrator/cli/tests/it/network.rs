//! Network allowlists (issue 20) through `orch run`: local servers on loopback stand in
//! for the allowed and denied hosts (`ORCH_PROXY_RESOLVE` maps their names), a scripted
//! agent tries every way out, and the effects are checked outside the sandbox: each
//! server's hit counter, a UDP and a TCP "resolver" that must hear nothing, the report
//! and the transcript. The landlock backend (as root: its own network namespace; as a
//! normal user: a user and network namespace) and the container backend.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::Fixture;

/// A server that counts the connections on which it read anything, and answers each
/// with `body` (over TLS when `tls` is given).
struct Server {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Server {
    fn start(body: &'static str, tls: Option<Arc<rustls::ServerConfig>>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (counter, tls) = (counter.clone(), tls.clone());
                std::thread::spawn(move || {
                    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                    match tls {
                        Some(config) => {
                            let conn = rustls::ServerConnection::new(config).unwrap();
                            answer(rustls::StreamOwned::new(conn, stream), body, &counter);
                        }
                        None => answer(stream, body, &counter),
                    }
                });
            }
        });
        Server { port, hits }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

fn answer<S: Read + Write>(mut stream: S, body: &str, counter: &AtomicUsize) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    if buf.is_empty() {
        return;
    }
    counter.fetch_add(1, Ordering::SeqCst);
    let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    let _ = stream.write_all(reply.as_bytes());
    let _ = stream.flush();
}

/// A self-signed certificate for `allowed.test`, made by the openssl CLI.
fn tls_config(dir: &std::path::Path) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let status = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2"])
        .args(["-subj", "/CN=allowed.test", "-addext", "subjectAltName=DNS:allowed.test", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(status.status.success(), "openssl: {}", String::from_utf8_lossy(&status.stderr));
    let certs =
        rustls::pki_types::CertificateDer::pem_file_iter(&cert).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    Arc::new(config)
}

/// A "resolver" that counts UDP datagrams, and one that counts TCP connections.
fn resolvers() -> (u16, Arc<AtomicUsize>, u16, Arc<AtomicUsize>) {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let udp_hits = Arc::new(AtomicUsize::new(0));
    let h = udp_hits.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while udp.recv_from(&mut buf).is_ok() {
            h.fetch_add(1, Ordering::SeqCst);
        }
    });
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    let tcp_hits = Arc::new(AtomicUsize::new(0));
    let h = tcp_hits.clone();
    std::thread::spawn(move || {
        for _ in tcp.incoming().flatten() {
            h.fetch_add(1, Ordering::SeqCst);
        }
    });
    (udp_port, udp_hits, tcp_port, tcp_hits)
}

/// A client that needs only bash and base64 (so it runs in the busybox test image):
/// `net.sh get URL` through `$HTTP_PROXY` with its credential, `net.sh direct IP PORT`
/// (a TCP connect that ignores the proxy), `net.sh udp IP PORT` (one datagram).
const CLIENT: &str = r#"p=${HTTP_PROXY#http://}; cred=${p%@*}; hp=${p##*@}; ph=${hp%:*}; pp=${hp##*:}
auth=$(printf %s "$cred" | base64 | tr -d '\n')
case $1 in
get)
  exec 3<>"/dev/tcp/$ph/$pp" || { echo NO-PROXY; exit 0; }
  printf 'GET %s HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n' "$2" "$auth" >&3
  cat <&3 ;;
direct) if (exec 3<>"/dev/tcp/$2/$3") 2>/dev/null; then echo CONNECTED; else echo REFUSED; fi ;;
udp) if (echo query > "/dev/udp/$2/$3") 2>/dev/null; then echo SENT; else echo NOT-SENT; fi ;;
esac
"#;

struct World {
    fx: Fixture,
    allowed: Server,
    denied: Server,
    tls: Server,
    udp: Arc<AtomicUsize>,
    dns_tcp: Arc<AtomicUsize>,
    ports: (u16, u16),
}

fn world(run_id: &str) -> World {
    let fx = Fixture::new(run_id, &[("net.sh", CLIENT), ("README.md", "net\n")]);
    let allowed = Server::start("from-allowed", None);
    let denied = Server::start("from-denied", None);
    let tls = Server::start("from-tls", Some(tls_config(fx.dir.path())));
    let (udp_port, udp, tcp_port, dns_tcp) = resolvers();
    World { fx, allowed, denied, tls, udp, dns_tcp, ports: (udp_port, tcp_port) }
}

fn workflow(sandbox: &str, setup: bool) -> String {
    let setup = if setup {
        "setup:\n  commands: [\"bash net.sh get http://index.crates.io:{PA}/config.json\", \
         \"bash net.sh get http://allowed.test:{PA}/from-setup\"]\n  network: { allow: [preset:rust, 127.0.0.1] }\n"
    } else {
        ""
    };
    format!(
        "version: 1\nname: net\n{setup}defaults:\n  tools: [Bash]\n  limits: {{ max_turns: 20, timeout: 3m }}\n  \
         sandbox: {sandbox}\nagents:\n  a:\n    prompt: Fetch.\n    sandbox: {{ network: {{ allow: [allowed.test, \
         127.0.0.1], deny: [denied.test] }} }}\n  b:\n    prompt: Fetch.\n    sandbox: {{ network: {{ allow: \
         [allowed.test] }} }}\n"
    )
}

fn script(w: &World, with_curl: bool) -> String {
    let (pa, pd, ps) = (w.allowed.port, w.denied.port, w.tls.port);
    let (pu, pt) = w.ports;
    let mut a = vec![
        format!("echo ran-1; bash net.sh get http://allowed.test:{pa}/a1"),
        format!("echo ran-2; bash net.sh get http://denied.test:{pd}/d1"),
        format!("echo ran-3; bash net.sh get http://elsewhere.test:{pd}/d2"),
        format!("echo ran-4; bash net.sh direct 127.0.0.1 {pd}; bash net.sh direct 127.0.0.1 {pa}"),
        format!("echo ran-5; bash net.sh udp 127.0.0.1 {pu}; bash net.sh direct 127.0.0.1 {pt}"),
        "echo ran-6; bash net.sh udp 8.8.8.8 53; bash net.sh direct 8.8.8.8 53; bash net.sh direct 1.1.1.1 443".into(),
    ];
    if with_curl {
        a.extend([
            format!("echo ran-7; curl -sS -k -m 10 https://allowed.test:{ps}/t1"),
            format!("echo ran-8; curl -sS -k -m 10 https://denied.test:{ps}/t2; echo rc=$?"),
            format!("echo ran-9; curl -sS -m 5 --noproxy '*' http://allowed.test:{pa}/np; echo rc=$?"),
            format!("echo ran-10; curl -sS -m 5 --noproxy '*' http://127.0.0.1:{pa}/np2; echo rc=$?"),
            // `CONNECT allowed.test` carrying a ClientHello for another name.
            format!(
                "echo ran-11; curl -sS -k -m 10 https://evil.test:{ps}/sni --connect-to evil.test:{ps}:allowed.test:{ps}; \
                 echo rc=$?"
            ),
        ]);
    }
    let turns = |cmds: &[String]| {
        cmds.iter()
            .map(|c| format!("    - tool_calls: [{{ name: Bash, input: {{ command: {} }} }}]\n", serde_json_str(c)))
            .collect::<String>()
    };
    let b = vec![format!("echo ran-b; bash net.sh get http://allowed.test:{pa}/b1")];
    format!(
        "version: 1\nagents:\n  a:\n{}    - text: Done.\n  b:\n{}    - text: Done.\n  synthesis:\n    - text: Summary.\n",
        turns(&a),
        turns(&b)
    )
}

fn serde_json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn output_of<'a>(results: &'a [(String, bool, String)], marker: &str) -> &'a str {
    &results
        .iter()
        .find(|(_, _, out)| out.contains(marker))
        .unwrap_or_else(|| panic!("{marker} did not run: {results:#?}"))
        .2
}

fn run_case(run_id: &str, sandbox: &str, with_curl: bool) {
    let w = world(run_id);
    let wf = workflow(sandbox, true).replace("{PA}", &w.allowed.port.to_string());
    let out =
        w.fx.command(&wf, &script(&w, with_curl))
            .env("ORCH_PROXY_RESOLVE", "allowed.test=127.0.0.1;denied.test=127.0.0.1;index.crates.io=127.0.0.1")
            .output()
            .unwrap();
    let run = crate::support::Run::from_output(&w.fx.out, out);
    run.expect_code(0);

    let a = run.tool_results("a");
    // Allowed, through the proxy: the server answered.
    assert!(output_of(&a, "ran-1").contains("from-allowed"), "{a:#?}");
    // Denied by name, or not listed: 403 from the proxy.
    assert!(output_of(&a, "ran-2").contains("403"), "{a:#?}");
    assert!(output_of(&a, "ran-3").contains("403"), "{a:#?}");
    // Straight to the servers' addresses, and to the resolvers: nothing connects.
    let direct = output_of(&a, "ran-4");
    assert!(!direct.contains("CONNECTED") && direct.matches("REFUSED").count() == 2, "{direct}");
    let dns = output_of(&a, "ran-5");
    assert!(!dns.contains("CONNECTED") && !dns.lines().any(|l| l == "SENT") && dns.contains("REFUSED"), "{dns}");
    let outside = output_of(&a, "ran-6");
    assert!(!outside.contains("CONNECTED") && !outside.lines().any(|l| l == "SENT"), "{outside}");
    if with_curl {
        assert!(output_of(&a, "ran-7").contains("from-tls"), "{a:#?}");
        let denied_tls = output_of(&a, "ran-8");
        assert!(denied_tls.contains("403") && !denied_tls.contains("from-tls"), "{denied_tls}");
        let sni = output_of(&a, "ran-11");
        assert!(!sni.contains("from-tls") && !sni.contains("rc=0"), "{sni}");
        for marker in ["ran-9", "ran-10"] {
            let out = output_of(&a, marker);
            assert!(!out.contains("from-allowed") && !out.contains("rc=0"), "{marker}: {out}");
        }
    }
    // Agent b names allowed.test but not its private address: refused.
    let b = run.tool_results("b");
    let refused = output_of(&b, "ran-b");
    assert!(refused.contains("403") && refused.contains("private address"), "{refused}");

    // The effects, outside: a1 and the setup's registry fetch reached the allowed server,
    // nothing else reached any server.
    assert_eq!(w.allowed.hits(), 2, "the allowed server: agent a's one request and setup's one");
    assert_eq!(w.denied.hits(), 0, "nothing may reach the denied server");
    assert_eq!(w.tls.hits(), usize::from(with_curl), "the TLS server: the one allowed HTTPS request");
    assert_eq!(w.udp.load(Ordering::SeqCst), 0, "no datagram may reach the resolver");
    assert_eq!(w.dns_tcp.load(Ordering::SeqCst), 0, "no TCP connection may reach the resolver");

    // The report: per agent, hosts contacted (with bytes) and hosts denied.
    let net = &run.agent("a")["network"];
    let contacted = net["contacted"].as_array().unwrap();
    assert!(contacted.iter().any(|h| h["host"] == "allowed.test" && h["bytes_down"].as_u64().unwrap() > 0), "{net:#}");
    let denied = net["denied"].as_array().unwrap();
    assert!(denied.iter().any(|h| h["host"] == "denied.test"), "{net:#}");
    assert!(denied.iter().any(|h| h["host"] == "elsewhere.test"), "{net:#}");
    assert!(!contacted.iter().any(|h| h["host"] == "denied.test"), "{net:#}");
    // The setup's preset allowed the registry and nothing else.
    let setup = &run.report["setup"]["network"];
    assert!(setup["contacted"].as_array().unwrap().iter().any(|h| h["host"] == "index.crates.io"), "{setup:#}");
    assert!(setup["denied"].as_array().unwrap().iter().any(|h| h["host"] == "allowed.test"), "{setup:#}");
    // The transcript has every decision.
    let events = run.events("a");
    let decisions: Vec<_> = events.iter().filter(|e| e["type"] == "network").collect();
    assert!(decisions.iter().any(|e| e["host"] == "allowed.test" && e["allowed"] == true), "{decisions:#?}");
    assert!(decisions.iter().any(|e| e["host"] == "denied.test" && e["allowed"] == false), "{decisions:#?}");
    if with_curl {
        let sni = |e: &&&serde_json::Value| {
            e["allowed"] == false && e["reason"].as_str().is_some_and(|r| r.contains("evil.test"))
        };
        assert!(decisions.iter().any(|e| sni(&e)), "the SNI mismatch is refused: {decisions:#?}");
    }
    let md = std::fs::read_to_string(run.out.join("report.md")).unwrap();
    assert!(md.contains("`a` network: contacted `allowed.test:"), "{md}");
    assert!(md.contains("`denied.test:"), "{md}");
    // No proxy credential in the report.
    let report = std::fs::read_to_string(run.out.join("report.json")).unwrap();
    assert!(!report.contains("HTTP_PROXY"), "the report shows no credential");
}

#[test]
fn landlock_agents_reach_only_allowed_hosts_through_the_proxy() {
    run_case("t-net-ll", "{ backend: landlock }", true);
}

#[test]
fn container_agents_reach_only_allowed_hosts_through_the_proxy() {
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping the container network test");
        return;
    }
    let image = std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:tools".into());
    run_case("t-net-ct", &format!("{{ backend: container, image: \"{image}\" }}"), false);
}

/// WebFetch runs in the tool host, so it goes through the same proxy and allowlist: an
/// allowed URL is fetched through it, a denied one is refused and never reaches its
/// server.
fn web_fetch_case(run_id: &str, sandbox: &str) {
    let w = world(run_id);
    let (pa, pd) = (w.allowed.port, w.denied.port);
    let wf = format!(
        "version: 1\nname: net\ndefaults:\n  tools: [WebFetch]\n  limits: {{ max_turns: 5, timeout: 2m }}\n  sandbox: \
         {sandbox}\nagents:\n  w:\n    prompt: Fetch.\n    sandbox: {{ network: {{ allow: [127.0.0.1], deny: [denied.test] \
         }} }}\n"
    );
    let fetch = |url: String| {
        format!(
            "    - tool_calls: [{{ name: WebFetch, input: {{ url: \"{url}\", prompt: \"What does it say?\" }} }}]\n"
        )
    };
    let script = format!(
        "version: 1\nagents:\n  w:\n{}{}    - text: Done.\n  synthesis:\n    - text: Summary.\n",
        fetch(format!("http://127.0.0.1:{pa}/wf-allowed")),
        fetch(format!("http://denied.test:{pd}/wf-denied")),
    );
    let out = w.fx.command(&wf, &script).env("ORCH_PROXY_RESOLVE", "denied.test=127.0.0.1").output().unwrap();
    let run = crate::support::Run::from_output(&w.fx.out, out);
    run.expect_code(0);
    let results = run.tool_results("w");
    assert_eq!(results.len(), 2, "{results:#?}");
    assert!(results[0].2.contains("from-allowed"), "the allowed page came back: {results:#?}");
    assert!(!results[1].2.contains("from-denied"), "the denied page must not come back: {results:#?}");
    // The effects, outside: one request reached the allowed server, none the denied one.
    assert_eq!(w.allowed.hits(), 1, "the allowed server saw WebFetch's one request");
    assert_eq!(w.denied.hits(), 0, "nothing may reach the denied server");
    let decisions: Vec<_> = run.events("w").into_iter().filter(|e| e["type"] == "network").collect();
    assert!(decisions.iter().any(|e| e["host"] == "127.0.0.1" && e["allowed"] == true), "{decisions:#?}");
    assert!(decisions.iter().any(|e| e["host"] == "denied.test" && e["allowed"] == false), "{decisions:#?}");
}

#[test]
fn landlock_web_fetch_goes_through_the_proxy_and_its_allowlist() {
    web_fetch_case("t-net-wf-ll", "{ backend: landlock }");
}

#[test]
fn container_web_fetch_goes_through_the_proxy_and_its_allowlist() {
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping the container WebFetch test");
        return;
    }
    let image = std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:tools".into());
    web_fetch_case("t-net-wf-ct", &format!("{{ backend: container, image: \"{image}\" }}"));
}
