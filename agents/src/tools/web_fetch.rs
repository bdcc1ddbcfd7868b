//! `WebFetch` (Claude Code's name and input: `url`, `prompt`): fetches one page from
//! inside the tool host, so the request leaves through the sandbox's network rules
//! (its `HTTP_PROXY`/`HTTPS_PROXY` environment, which reqwest honours), never from the
//! coordinator and its secrets.
//!
//! As Claude Code does, `http://` is upgraded to `https://` (except for loopback
//! hosts, which serve no TLS), redirects are followed only within the same host (a
//! `www.` prefix aside), and a redirect to another host is reported to the model
//! instead of followed. HTML is converted to Markdown (`htmd`, without scripts and
//! styles); the body read and the text returned are capped.
//!
//! The `prompt`: Claude Code answers it with a small model over the page. orch returns
//! the page text with the prompt restated above it, so the agent's own model answers
//! it from the text (no second model call, no extra cost, nothing hidden from the
//! transcript). The tool is offered only when the agent's network is not `none`.

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::Url;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError};

/// The tool's name.
pub const WEB_FETCH_TOOL: &str = "WebFetch";

/// Bytes of a response body read at most.
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// Characters of page text returned at most.
pub const MAX_TEXT_CHARS: usize = 100_000;

/// Redirects followed at most (within one host).
pub const MAX_REDIRECTS: usize = 10;

/// How long one fetch may take in all.
const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchInput {
    /// The URL to fetch (http or https; http is upgraded to https).
    pub url: String,
    /// What you want to know from the page.
    pub prompt: String,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct WebFetch;

#[async_trait]
impl Tool for WebFetch {
    type Input = WebFetchInput;
    const NAME: &'static str = WEB_FETCH_TOOL;

    fn description(&self) -> &'static str {
        "Fetch one web page and read it as Markdown. Give the full `url` and, in `prompt`, what you want \
         to know from it; the page text comes back with your question above it, for you to answer. \
         http:// is upgraded to https://. Redirects within the same host are followed; a redirect to \
         another host is reported with its target, so you can fetch that URL in a new call. Long pages \
         are cut. The fetch goes through the sandbox's network rules: a host they do not allow fails. \
         Read-only: it changes nothing."
    }

    fn is_read_only(&self, _input: &Self::Input) -> bool {
        true
    }

    fn is_concurrency_safe(&self, _input: &Self::Input) -> bool {
        true
    }

    fn is_destructive(&self, _input: &Self::Input) -> bool {
        false
    }

    fn validate(&self, input: &Self::Input) -> Result<(), String> {
        target(&input.url)?;
        if input.prompt.trim().is_empty() {
            return Err("prompt is empty; say what you want to know from the page".into());
        }
        Ok(())
    }

    fn permission_subject(&self, input: &Self::Input) -> Option<String> {
        // Claude Code's rules name the host: `WebFetch(domain:example.com)`.
        target(&input.url).ok().and_then(|u| u.host_str().map(|h| format!("domain:{h}")))
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        let url = target(&input.url).map_err(ToolError)?;
        let fetch = fetch(url);
        let page = tokio::select! {
            page = tokio::time::timeout(TIMEOUT, fetch) => page
                .map_err(|_| ToolError(format!("fetching {} took more than {}s; try again later", input.url, TIMEOUT.as_secs())))??,
            () = ctx.cancel.cancelled() => return Err(ToolError("the fetch was cancelled".into())),
        };
        Ok(match page {
            Page::Redirect { from, to, status } => format!(
                "{from} redirects ({status}) to another host: {to}\nIt was not followed. To read it, call WebFetch \
                 again with that URL and the same prompt."
            ),
            Page::Body { url, status, content_type, text, truncated } => {
                let mut out = format!(
                    "Fetched {url} ({status}, {content_type}, {} characters{}).\nAnswer this from the page below: {}\n\n\
                     <page url=\"{url}\">\n{}\n</page>",
                    text.chars().count(),
                    if truncated { ", cut" } else { "" },
                    input.prompt.trim(),
                    text.trim_end()
                );
                if truncated {
                    out.push_str(&format!(
                        "\n[the page was longer; only the first {MAX_TEXT_CHARS} characters are shown]"
                    ));
                }
                out
            }
        })
    }
}

/// The URL to fetch: parsed, http or https only, upgraded to https unless the host
/// is a loopback one.
pub fn target(url: &str) -> Result<Url, String> {
    let mut parsed = Url::parse(url.trim())
        .map_err(|e| format!("`{url}` is not a URL ({e}); give a full one, such as https://example.com/page"))?;
    match parsed.scheme() {
        "https" => {}
        "http" => {
            if !is_loopback(&parsed) && parsed.set_scheme("https").is_err() {
                return Err(format!("cannot upgrade `{url}` to https"));
            }
        }
        other => return Err(format!("WebFetch fetches http and https URLs only, not `{other}:`")),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{url}` names no host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("the URL carries a user name or password; leave credentials out of it".into());
    }
    Ok(parsed)
}

fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether a redirect from `from` to `to` stays on the same site: the same scheme,
/// port and host, with or without a leading `www.`.
pub fn same_host(from: &Url, to: &Url) -> bool {
    let bare = |u: &Url| u.host_str().map(|h| h.trim_start_matches("www.").to_ascii_lowercase());
    from.scheme() == to.scheme() && from.port_or_known_default() == to.port_or_known_default() && bare(from) == bare(to)
}

enum Page {
    Redirect { from: Url, to: Url, status: u16 },
    Body { url: Url, status: u16, content_type: String, text: String, truncated: bool },
}

async fn fetch(mut url: Url) -> Result<Page, ToolError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The environment's proxy settings apply (reqwest reads HTTP(S)_PROXY).
    let builder = || {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(20))
            .user_agent(concat!("orch/", env!("CARGO_PKG_VERSION"), " (WebFetch)"))
    };
    // The system's CA certificates verify https; a sandbox without any (a container
    // image without ca-certificates) still fetches http, and https fails with a reason.
    let (client, no_roots) = match builder().build() {
        Ok(client) => (client, false),
        Err(first) => match builder().tls_certs_only(Vec::new()).build() {
            Ok(client) => (client, true),
            Err(_) => return Err(ToolError(format!("cannot build the http client: {first}"))),
        },
    };
    let hint = if no_roots {
        " (this sandbox has no CA certificates, so https cannot be verified: install ca-certificates in its image)"
    } else {
        ""
    };
    for _ in 0..=MAX_REDIRECTS {
        let response = client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, "text/html, text/markdown, text/plain, application/json;q=0.9, */*;q=0.5")
            .send()
            .await
            .map_err(|e| ToolError(format!("cannot fetch {url}: {}{hint}", describe(&e))))?;
        let status = response.status();
        if status.is_redirection() {
            let Some(location) = response.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok()) else {
                return Err(ToolError(format!("{url} answered {status} without a Location to go to")));
            };
            let next = url.join(location).map_err(|e| ToolError(format!("{url} redirects to a bad URL: {e}")))?;
            if !same_host(&url, &next) {
                return Ok(Page::Redirect { from: url, to: next, status: status.as_u16() });
            }
            url = next;
            continue;
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let (body, cut) = read_body(response).await.map_err(|e| ToolError(format!("cannot read {url}: {e}")))?;
        if !status.is_success() {
            let preview: String = String::from_utf8_lossy(&body).chars().take(500).collect();
            return Err(ToolError(format!("{url} answered {status}: {}", preview.trim())));
        }
        let text = to_text(&content_type, &body)?;
        let total = text.chars().count();
        let (text, truncated) =
            if total > MAX_TEXT_CHARS { (text.chars().take(MAX_TEXT_CHARS).collect(), true) } else { (text, cut) };
        let content_type = if content_type.is_empty() { "no content type".to_string() } else { content_type };
        return Ok(Page::Body { url, status: status.as_u16(), content_type, text, truncated });
    }
    Err(ToolError(format!("{url} redirected more than {MAX_REDIRECTS} times; giving up")))
}

/// The body, at most [`MAX_BODY_BYTES`]; `true` when it was longer.
async fn read_body(response: reqwest::Response) -> Result<(Vec<u8>, bool), String> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| describe(&e))?;
        let room = MAX_BODY_BYTES - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// The page as text: HTML converted to Markdown; other text as it is; binary refused.
pub fn to_text(content_type: &str, body: &[u8]) -> Result<String, ToolError> {
    let mime = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let text = String::from_utf8_lossy(body);
    let looks_html = mime.contains("html") || (mime.is_empty() && text.trim_start().starts_with('<'));
    if looks_html {
        let converter =
            htmd::HtmlToMarkdown::builder().skip_tags(vec!["script", "style", "noscript", "template"]).build();
        return converter.convert(&text).map_err(|e| ToolError(format!("cannot convert the page to Markdown: {e}")));
    }
    let textual = mime.is_empty()
        || mime.starts_with("text/")
        || mime.ends_with("json")
        || mime.ends_with("xml")
        || mime.ends_with("javascript")
        || mime.ends_with("yaml");
    if !textual || body.contains(&0) {
        return Err(ToolError(format!("the page is `{mime}`, not text; WebFetch reads HTML and text pages only")));
    }
    Ok(text.into_owned())
}

fn describe(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_upgraded() {
        assert_eq!(target("http://example.com/a?b=1").unwrap().as_str(), "https://example.com/a?b=1");
        assert_eq!(target("https://example.com").unwrap().as_str(), "https://example.com/");
        // Loopback hosts serve no TLS: they stay http.
        assert_eq!(target("http://127.0.0.1:8080/x").unwrap().as_str(), "http://127.0.0.1:8080/x");
        assert_eq!(target("http://localhost/x").unwrap().scheme(), "http");
        assert!(target("ftp://example.com/f").unwrap_err().contains("http and https"));
        assert!(target("file:///etc/passwd").is_err());
        assert!(target("example.com").unwrap_err().contains("not a URL"));
        assert!(target("https://user:pw@example.com/").unwrap_err().contains("credentials"));
    }

    #[test]
    fn redirects_stay_on_one_host() {
        let u = |s: &str| Url::parse(s).unwrap();
        assert!(same_host(&u("https://example.com/a"), &u("https://example.com/b")));
        assert!(same_host(&u("https://example.com/a"), &u("https://www.example.com/b")));
        assert!(!same_host(&u("https://example.com/a"), &u("https://evil.example.org/b")));
        assert!(!same_host(&u("https://example.com/a"), &u("http://example.com/b")));
        assert!(!same_host(&u("http://127.0.0.1:1/a"), &u("http://127.0.0.1:2/b")));
    }

    #[test]
    fn html_becomes_markdown_without_scripts() {
        let html = b"<html><head><style>p{}</style><script>alert('x')</script></head>\
            <body><h1>Title</h1><p>Some <b>bold</b> text.</p></body></html>";
        let md = to_text("text/html; charset=utf-8", html).unwrap();
        assert!(md.contains("# Title") && md.contains("**bold**"), "{md}");
        assert!(!md.contains("alert") && !md.contains("p{}"), "{md}");
        assert_eq!(to_text("text/plain", b"plain").unwrap(), "plain");
        assert!(to_text("image/png", b"\x89PNG").is_err());
    }
}
