//! HTTP plumbing shared by the HTTP providers: posting a JSON body, classifying the
//! answer, and reading a server-sent-event stream with an idle timeout.

use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::header::HeaderMap;

use super::ModelError;
use super::retry::{AttemptError, classify_status, classify_transport};

/// How long a stream may stay silent before it counts as broken. Servers send pings
/// far more often than this.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Posts `body` to `url`; any non-2xx answer becomes a classified [`AttemptError`].
pub(crate) async fn post_json(
    client: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: &serde_json::Value,
) -> Result<reqwest::Response, AttemptError> {
    let response = client.post(url).headers(headers).json(body).send().await.map_err(|e| classify_transport(&e))?;
    let status = response.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(response);
    }
    let headers = response.headers().clone();
    let text = response.text().await.unwrap_or_default();
    Err(classify_status(status, &headers, &text))
}

/// The events of a streaming response. Transport failures and silence past
/// [`IDLE_TIMEOUT`] are retryable; undecodable bytes are a retryable protocol error.
pub(crate) fn events(response: reqwest::Response) -> impl Stream<Item = Result<Event, AttemptError>> + Send {
    let inner = response.bytes_stream().eventsource();
    futures::stream::unfold(Box::pin(inner), |mut inner| async move {
        let next = match tokio::time::timeout(IDLE_TIMEOUT, inner.next()).await {
            Err(_) => Some(Err(AttemptError::retryable(ModelError::Network {
                attempts: 1,
                message: format!("the stream sent nothing for {}s", IDLE_TIMEOUT.as_secs()),
            }))),
            Ok(None) => None,
            Ok(Some(Ok(event))) => Some(Ok(event)),
            Ok(Some(Err(EventStreamError::Transport(e)))) => Some(Err(classify_transport(&e))),
            Ok(Some(Err(e))) => Some(Err(protocol(format!("unreadable event stream: {e}")))),
        };
        next.map(|item| (item, inner))
    })
}

/// A retryable protocol error: a corrupt stream is usually a transient proxy fault.
pub(crate) fn protocol(message: impl Into<String>) -> AttemptError {
    AttemptError::retryable(ModelError::Protocol { message: message.into() })
}

/// The error for a stream that ended before its final event.
pub(crate) fn cut_short() -> AttemptError {
    AttemptError::retryable(ModelError::Network {
        attempts: 1,
        message: "the response stream ended before the message was complete".to_string(),
    })
}

/// A reqwest client with orch's defaults. Installs the TLS crypto provider once.
pub(crate) fn client() -> Result<reqwest::Client, ModelError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(30))
        .user_agent(concat!("orch/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ModelError::Config { message: format!("cannot build the http client: {e}") })
}
