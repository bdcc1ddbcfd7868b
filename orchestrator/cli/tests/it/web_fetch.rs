//! `WebFetch` through the real binary against the mock model server and a local HTTP
//! server: with `network: full` the page is fetched by the tool host and comes back as
//! Markdown with the prompt restated; a same-host redirect is followed, a cross-host
//! one is reported and not followed. Under `network: none` the tool is absent from the
//! pool, and a call of it says why. `WebSearch` sends the API's `web_search` server tool
//! (with the domain filters) in a nested request and returns its results.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use orch_testkit::mock::{MockServer, Step, Turn};
use serde_json::{Value, json};

use crate::support::{Fixture, Run};

const PAGE: &str = "<html><head><title>t</title><script>SCRIPT-BODY()</script></head>\
<body><h1>Release notes</h1><p>Version <b>2.1</b> fixes the parser.</p></body></html>";

/// A tiny HTTP server on 127.0.0.1: `/page` is HTML, `/moved` redirects to `/page`,
/// `/away` redirects to another host. It records each request's path and user agent.
fn serve() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).to_string();
            let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
            let agent = head
                .lines()
                .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("user-agent")))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default();
            log.lock().unwrap().push(format!("{path} {agent}"));
            let response = match path.as_str() {
                "/page" => format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{PAGE}",
                    PAGE.len()
                ),
                "/moved" => "HTTP/1.1 302 Found\r\nLocation: /page\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_string(),
                "/away" => "HTTP/1.1 301 Moved\r\nLocation: https://elsewhere.invalid/x\r\nContent-Length: 0\r\n\
                            Connection: close\r\n\r\n"
                    .to_string(),
                _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string(),
            };
            let _ = stream.write_all(response.as_bytes());
        }
    });
    (base, seen)
}

async fn run_on_mock(fx: &Fixture, mock: &MockServer, workflow: &str) -> Run {
    fx.run_off_runtime(fx.mock_command(workflow, &mock.url())).await
}

fn workflow(network: &str) -> String {
    format!(
        "version: 1\nname: fetch\ndefaults:\n  tools: [Read, WebFetch]\n  sandbox: {{ network: {network} }}\n  \
         limits: {{ max_turns: 5, timeout: 2m }}\nagents:\n  reader:\n    prompt: Read the release notes.\n"
    )
}

/// The text of every `tool_result` block in a request's messages.
fn tool_results(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| match &b["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_fetch_reads_a_page_and_reports_a_cross_host_redirect() {
    let (base, seen) = serve();
    let fx = Fixture::new("t-webfetch", &[("a.txt", "alpha\n")]);
    let mock = MockServer::start().await;
    // Claude Code's input: `url` and `prompt`.
    mock.push(Step::tool("WebFetch", json!({ "url": format!("{base}/moved"), "prompt": "Which version is it?" })));
    mock.push(Step::tool("WebFetch", json!({ "url": format!("{base}/away"), "prompt": "Anything there?" })));
    mock.push(Step::text("Version 2.1."));
    let run = run_on_mock(&fx, &mock, &workflow("full")).await;
    run.expect_code(0);
    let requests = mock.requests();
    assert!(requests[0].tool_names().contains(&"WebFetch"), "{:?}", requests[0].tool_names());
    let results = tool_results(requests[2].messages());
    assert_eq!(results.len(), 2, "{results:?}");
    let page = &results[0];
    assert!(page.contains("# Release notes") && page.contains("**2.1**"), "{page}");
    assert!(page.contains("Which version is it?"), "the prompt is restated: {page}");
    assert!(page.contains(&format!("{base}/page")), "the redirect within the host was followed: {page}");
    assert!(!page.contains("SCRIPT-BODY"), "{page}");
    let away = &results[1];
    assert!(away.contains("https://elsewhere.invalid/x") && away.contains("not followed"), "{away}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.iter().map(|s| s.split(' ').next().unwrap()).collect::<Vec<_>>(), ["/moved", "/page", "/away"]);
    assert!(seen.iter().all(|s| s.contains("(WebFetch)")), "{seen:?}");
}

/// `--deny Read` denies reading files, not fetching pages: a `WebFetch` subject is a
/// host, which the catalog says, so a path rule never covers it (it once did, for every
/// tool whose subject was not a path). The page is fetched, the file read is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_deny_does_not_deny_web_fetch() {
    let (base, seen) = serve();
    let fx = Fixture::new("t-webfetch-deny-read", &[("secret.txt", "SECRET-TEXT\n")]);
    let mock = MockServer::start().await;
    mock.push(Step::tool("Read", json!({ "file_path": "secret.txt" })));
    mock.push(Step::tool("WebFetch", json!({ "url": format!("{base}/page"), "prompt": "Which version?" })));
    mock.push(Step::text("Version 2.1."));
    let mut cmd = crate::support::orch();
    cmd.current_dir(&fx.repo).env("ANTHROPIC_API_KEY", "test").env("ANTHROPIC_BASE_URL", mock.url()).args([
        "exec",
        "--tools",
        "Read,WebFetch",
        "--network",
        "full",
        "--deny",
        "Read",
        "read the notes",
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let requests = mock.requests();
    let results = tool_results(requests[1].messages());
    assert!(results[0].contains("denied by the permission rule `Read`"), "{}", results[0]);
    assert!(!results[0].contains("SECRET-TEXT"), "{}", results[0]);
    let results = tool_results(requests[2].messages());
    assert!(results[1].contains("# Release notes"), "the page was fetched: {}", results[1]);
    assert_eq!(seen.lock().unwrap().len(), 1, "the tool host fetched the page once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_network_web_fetch_is_absent_from_the_pool() {
    let (base, seen) = serve();
    let fx = Fixture::new("t-webfetch-off", &[("a.txt", "alpha\n")]);
    let mock = MockServer::start().await;
    mock.push(Step::tool("WebFetch", json!({ "url": format!("{base}/page"), "prompt": "?" })));
    mock.push(Step::text("No network."));
    let run = run_on_mock(&fx, &mock, &workflow("none")).await;
    run.expect_code(0);
    let requests = mock.requests();
    assert!(!requests[0].tool_names().contains(&"WebFetch"), "{:?}", requests[0].tool_names());
    let results = tool_results(requests[1].messages());
    assert!(results[0].contains("network: none"), "{}", results[0]);
    assert!(seen.lock().unwrap().is_empty(), "nothing was fetched");
}

fn search_workflow(network: &str) -> String {
    format!(
        "version: 1\nname: search\ndefaults:\n  tools: [Read, WebSearch]\n  sandbox: {{ network: {network} }}\n  \
         limits: {{ max_turns: 5, timeout: 2m }}\nagents:\n  searcher:\n    prompt: Find the release notes.\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_search_sends_the_server_tool_with_the_domains_and_returns_its_results() {
    let fx = Fixture::new("t-websearch", &[("a.txt", "alpha\n")]);
    let mock = MockServer::start().await;
    // Claude Code's input.
    let input = json!({ "query": "orch 2.1 release notes", "allowed_domains": ["example.com"] });
    mock.push(Step::tool("WebSearch", input));
    // The nested request's answer: the search results block, then the summary.
    let results = json!({
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [{ "type": "web_search_result", "title": "Orch 2.1", "url": "https://example.com/orch-2-1",
                      "encrypted_content": "x", "page_age": "2 days ago" }]
    });
    mock.push(Step::from(Turn::text("Version 2.1 fixes the parser (example.com).").with_raw_block(results)));
    mock.push(Step::text("Done."));
    let run = run_on_mock(&fx, &mock, &search_workflow("full")).await;
    run.expect_code(0);
    let requests = mock.requests();
    assert_eq!(requests.len(), 3, "{}", run.stderr);
    assert!(requests[0].tool_names().contains(&"WebSearch"), "{:?}", requests[0].tool_names());
    // The nested request offers the server tool alone, with the domains.
    let tools = requests[1].json["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["type"], "web_search_20250305");
    assert_eq!(tools[0]["name"], "web_search");
    assert_eq!(tools[0]["allowed_domains"], json!(["example.com"]));
    assert!(requests[1].json.to_string().contains("orch 2.1 release notes"));
    // Its results come back as the tool result.
    let out = tool_results(requests[2].messages());
    assert!(out[0].contains("https://example.com/orch-2-1") && out[0].contains("Orch 2.1"), "{}", out[0]);
    assert!(out[0].contains("fixes the parser"), "{}", out[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_network_web_search_is_absent() {
    let fx = Fixture::new("t-websearch-off", &[("a.txt", "alpha\n")]);
    let mock = MockServer::start().await;
    mock.push(Step::tool("WebSearch", json!({ "query": "anything" })));
    mock.push(Step::text("No network."));
    let run = run_on_mock(&fx, &mock, &search_workflow("none")).await;
    run.expect_code(0);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "no nested request: {}", run.stderr);
    assert!(!requests[0].tool_names().contains(&"WebSearch"), "{:?}", requests[0].tool_names());
    assert!(tool_results(requests[1].messages())[0].contains("network: none"));
}
