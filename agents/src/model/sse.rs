//! HTTP plumbing shared by the HTTP providers: posting a JSON body, classifying the
//! answer, and reading a server-sent-event stream, with a first-byte timeout on the
//! answer and an idle timeout between its events.

use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::header::HeaderMap;

use super::ModelError;
use super::retry::{AttemptError, classify_status, classify_transport};

/// Posts the JSON `body` to `url` and waits at most `first_byte` for the answer's headers; any
/// non-2xx answer becomes a classified [`AttemptError`], and silence a retryable one.
pub(crate) async fn post_json(
    client: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: bytes::Bytes,
    first_byte: Duration,
) -> Result<reqwest::Response, AttemptError> {
    let send =
        client.post(url).headers(headers).header(reqwest::header::CONTENT_TYPE, "application/json").body(body).send();
    let response = match tokio::time::timeout(first_byte, send).await {
        Err(_) => return Err(silent(format!("the model api sent no answer within {}", secs(first_byte)))),
        Ok(r) => r.map_err(|e| classify_transport(&e))?,
    };
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(response);
    }
    let headers = response.headers().clone();
    let text = tokio::time::timeout(first_byte, response.text()).await.ok().and_then(Result::ok).unwrap_or_default();
    Err(classify_status(status, &headers, &text))
}

/// The events of a streaming response: the first must come within `first`, each next
/// one within `idle` of the one before. Transport failures and silence are retryable;
/// undecodable bytes are a protocol error, named at once.
pub(crate) fn events(
    response: reqwest::Response,
    first: Duration,
    idle: Duration,
) -> impl Stream<Item = Result<Event, AttemptError>> + Send {
    let inner = Box::pin(response.bytes_stream().eventsource());
    futures::stream::unfold((inner, true), move |(mut inner, is_first)| async move {
        let wait = if is_first { first } else { idle };
        let next = match tokio::time::timeout(wait, inner.next()).await {
            Err(_) if is_first => {
                Some(Err(silent(format!("the model api sent headers, then nothing for {}", secs(wait)))))
            }
            Err(_) => Some(Err(silent(format!("the stream sent nothing for {}", secs(wait))))),
            Ok(None) => None,
            Ok(Some(Ok(event))) => Some(Ok(event)),
            Ok(Some(Err(EventStreamError::Transport(e)))) => Some(Err(classify_transport(&e))),
            Ok(Some(Err(e))) => Some(Err(protocol(format!("unreadable event stream: {e}")))),
        };
        next.map(|item| (item, (inner, false)))
    })
}

/// Waits at most `wait` for `body`; silence is a retryable network error.
pub(crate) async fn read_whole(response: reqwest::Response, wait: Duration) -> Result<String, AttemptError> {
    match tokio::time::timeout(wait, response.text()).await {
        Err(_) => Err(silent(format!("the response body did not arrive within {}", secs(wait)))),
        Ok(r) => r.map_err(|e| classify_transport(&e)),
    }
}

/// A wait for the model that timed out: retryable, as a network fault.
fn silent(message: String) -> AttemptError {
    AttemptError::retryable(ModelError::Network {
        attempts: 1,
        message: format!("{message}; the timeouts are set by model_settings (first_byte_timeout, idle_timeout)"),
    })
}

fn secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// A protocol error: bytes that are not the event schema (garbage, invalid JSON,
/// tool-call input that is not JSON). Named at once, without retries: the same request
/// gets the same kind of answer, and retrying would only spend the retry budget. A
/// stream cut short is a network fault instead ([`cut_short`]), and is retried.
pub(crate) fn protocol(message: impl Into<String>) -> AttemptError {
    AttemptError::fatal(ModelError::Protocol { message: message.into() })
}

/// The error for a stream that ended before its final event.
pub(crate) fn cut_short() -> AttemptError {
    AttemptError::retryable(ModelError::Network {
        attempts: 1,
        message: "the response stream ended before the message was complete".to_string(),
    })
}

/// A reqwest client with orch's defaults for requests to `url`. Installs the TLS crypto
/// provider once. For a plain `http://` URL (a local proxy, a test server) the system's
/// root certificates are not loaded: reading and parsing them was half of a whole
/// 22-turn session's instructions (BENCHMARKS.md). Such a client trusts no root, so an
/// `https://` request through it fails verification instead of going out unchecked.
pub(crate) fn client(url: &str) -> Result<reqwest::Client, ModelError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .user_agent(concat!("orch/", env!("CARGO_PKG_VERSION")));
    if is_plain_http(url) {
        builder = builder.tls_certs_only(Vec::new());
    }
    builder.build().map_err(|e| ModelError::Config { message: format!("cannot build the http client: {e}") })
}

/// Whether `url` is plain HTTP (no TLS), by its scheme.
fn is_plain_http(url: &str) -> bool {
    url.get(..7).is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_http_url_skips_the_root_certificates() {
        assert!(is_plain_http("http://127.0.0.1:8080/v1/messages"));
        assert!(is_plain_http("HTTP://localhost"));
        assert!(!is_plain_http("https://api.anthropic.com/v1/messages"));
        assert!(!is_plain_http("http:/"));
        assert!(!is_plain_http(""));
        assert!(client("http://127.0.0.1:1").is_ok());
        assert!(client("https://api.anthropic.com").is_ok());
    }
}
