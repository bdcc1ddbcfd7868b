//! A small GitHub REST client on reqwest (the workspace's one TLS stack): JSON in and
//! out, `Link` pagination, retries of rate limits and server errors honouring
//! `retry-after`, and a dry-run mode that records every write instead of sending it.

use std::sync::Mutex;
use std::time::Duration;

use reqwest::Method;
use serde::Serialize;
use serde_json::Value;

use super::context::Token;

/// Most attempts of one request.
const ATTEMPTS: u32 = 4;
/// Longest wait between attempts.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// Most pages read of one list.
const MAX_PAGES: usize = 50;

/// A request that failed, with the HTTP status when there was an answer.
#[derive(Debug, Clone)]
pub(crate) struct HttpError {
    pub status: Option<u16>,
    pub message: String,
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.status {
            Some(status) => write!(f, "HTTP {status}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// One request as dry-run records it (`publish.json`).
#[derive(Debug, Clone, Serialize)]
pub struct PlannedRequest {
    /// The output it belongs to.
    pub output: String,
    pub method: String,
    pub url: String,
    #[serde(skip_serializing_if = "Value::is_null")]
    pub body: Value,
}

pub(crate) struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<Token>,
    /// Dry run: writes are recorded here, not sent.
    planned: Option<Mutex<Vec<PlannedRequest>>>,
}

impl Client {
    pub fn new(base: &str, token: Option<Token>, dry_run: bool) -> Result<Client, HttpError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .user_agent(concat!("orch/", env!("CARGO_PKG_VERSION")))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| HttpError { status: None, message: format!("cannot build the HTTP client: {e}") })?;
        Ok(Client {
            http,
            base: base.trim_end_matches('/').to_string(),
            token,
            planned: dry_run.then(|| Mutex::new(Vec::new())),
        })
    }

    pub fn is_dry_run(&self) -> bool {
        self.planned.is_some()
    }

    /// Whether reads reach GitHub (a dry run without a token reads nothing).
    pub fn can_read(&self) -> bool {
        self.token.is_some()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The writes a dry run recorded, in order.
    pub fn planned(&self) -> Vec<PlannedRequest> {
        self.planned.as_ref().map(|p| p.lock().unwrap_or_else(|e| e.into_inner()).clone()).unwrap_or_default()
    }

    /// Records a step that is not an HTTP request (a `git push`) in a dry run.
    pub fn plan(&self, output: &str, method: &str, url: String, body: Value) {
        if let Some(planned) = &self.planned {
            let entry = PlannedRequest { output: output.to_string(), method: method.to_string(), url, body };
            planned.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
        }
    }

    /// GET one resource.
    pub async fn get(&self, path: &str) -> Result<Value, HttpError> {
        if !self.can_read() {
            return Err(HttpError { status: None, message: "no token to read with".to_string() });
        }
        Ok(self.send(Method::GET, &self.url(path), None).await?.0)
    }

    /// GET every page of a list (`per_page=100`, following `Link: rel="next"`).
    pub async fn list(&self, path: &str) -> Result<Vec<Value>, HttpError> {
        if !self.can_read() {
            return Ok(Vec::new());
        }
        let sep = if path.contains('?') { '&' } else { '?' };
        let mut next = Some(format!("{}{sep}per_page=100", self.url(path)));
        let mut out = Vec::new();
        let mut pages = 0;
        while let Some(url) = next.take() {
            let (body, link) = self.send(Method::GET, &url, None).await?;
            match body {
                Value::Array(items) => out.extend(items),
                other => {
                    return Err(HttpError {
                        status: None,
                        message: format!("expected a list from {url}, got {other}"),
                    });
                }
            }
            pages += 1;
            if pages < MAX_PAGES {
                next = link.as_deref().and_then(next_link);
            }
        }
        Ok(out)
    }

    /// A write (POST, PATCH). In a dry run it is recorded and answers `Null`.
    pub async fn write(&self, output: &str, method: Method, path: &str, body: Value) -> Result<Value, HttpError> {
        let url = self.url(path);
        if self.is_dry_run() {
            self.plan(output, method.as_str(), url, body);
            return Ok(Value::Null);
        }
        Ok(self.send(method, &url, Some(&body)).await?.0)
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
    ) -> Result<(Value, Option<String>), HttpError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut request = self
                .http
                .request(method.clone(), url)
                .header("accept", "application/vnd.github+json")
                .header("x-github-api-version", "2022-11-28");
            if let Some(token) = &self.token {
                request = request.bearer_auth(token.expose());
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(r) => r,
                Err(e) if attempt < ATTEMPTS => {
                    tokio::time::sleep(backoff(attempt)).await;
                    tracing::debug!("retrying {url}: {e}");
                    continue;
                }
                Err(e) => return Err(HttpError { status: None, message: format!("cannot reach {url}: {e}") }),
            };
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let text = response.text().await.unwrap_or_default();
            let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
            if (200..300).contains(&status) {
                let value = if text.trim().is_empty() {
                    Value::Null
                } else {
                    serde_json::from_str(&text).unwrap_or(Value::Null)
                };
                return Ok((value, header("link")));
            }
            let rate_limited = status == 429
                || (status == 403
                    && (header("retry-after").is_some() || header("x-ratelimit-remaining").as_deref() == Some("0")));
            if (rate_limited || status >= 500) && attempt < ATTEMPTS {
                let wait = header("retry-after")
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .map(Duration::from_secs)
                    .unwrap_or_else(|| backoff(attempt))
                    .min(MAX_WAIT);
                tokio::time::sleep(wait).await;
                continue;
            }
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| {
                    let message = v["message"].as_str()?.to_string();
                    let errors: Vec<String> = v["errors"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|e| {
                                    e.as_str()
                                        .map(str::to_string)
                                        .unwrap_or_else(|| e["message"].as_str().unwrap_or("").to_string())
                                })
                                .filter(|e| !e.is_empty())
                                .collect()
                        })
                        .unwrap_or_default();
                    Some(if errors.is_empty() { message } else { format!("{message}: {}", errors.join("; ")) })
                })
                .unwrap_or_else(|| text.chars().take(200).collect());
            let message =
                if rate_limited { format!("rate limited after {attempt} attempts: {message}") } else { message };
            return Err(HttpError { status: Some(status), message });
        }
    }
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(500u64 << attempt.min(6))
}

/// The `rel="next"` target of a `Link` header.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then(|| target.trim().trim_start_matches('<').trim_end_matches('>').to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_the_next_link() {
        let link = "<https://x/a?page=2>; rel=\"next\", <https://x/a?page=5>; rel=\"last\"";
        assert_eq!(next_link(link).as_deref(), Some("https://x/a?page=2"));
        assert_eq!(next_link("<https://x/a?page=1>; rel=\"first\""), None);
    }
}
