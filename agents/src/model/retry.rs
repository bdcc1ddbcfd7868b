//! Retries with exponential backoff and jitter, and the per-endpoint limiter that every
//! agent of a process shares.
//!
//! The limiter is process-wide and keyed by endpoint, so a rate limit seen by one agent
//! slows the whole fan-out instead of every agent hammering the API on its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rand::Rng;
use reqwest::header::HeaderMap;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;

use super::{ModelError, ModelResponse, StreamEvent, StreamSink};

/// How a provider retries.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Longest `retry-after` honoured; a longer one is cut to this.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 10,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(32),
            max_retry_after: Duration::from_secs(300),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1`, after `attempt` failed (1-based):
    /// `retry_after` when the server gave one, else exponential backoff with up to 25%
    /// jitter on top.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after {
            return wait.min(self.max_retry_after);
        }
        let exp = attempt.saturating_sub(1).min(20);
        let backoff = self.base_delay.saturating_mul(1u32 << exp).min(self.max_delay);
        let jitter = rand::rng().random_range(0.0..=0.25);
        backoff + backoff.mul_f64(jitter)
    }
}

/// One failed attempt, classified.
#[derive(Debug, Clone)]
pub struct AttemptError {
    pub error: ModelError,
    pub retryable: bool,
    /// The server said "overloaded" (HTTP 529 or an `overloaded_error` event).
    pub overloaded: bool,
    pub retry_after: Option<Duration>,
    /// The connection was refused or could not be made: retried only
    /// [`CONNECT_ATTEMPTS`] times, since a server that is not there rarely comes back
    /// within the backoff.
    pub refused: bool,
}

/// Attempts in all for a connection that cannot be made (about 4 s of waiting).
pub const CONNECT_ATTEMPTS: u32 = 4;

impl AttemptError {
    pub fn fatal(error: ModelError) -> Self {
        Self { error, retryable: false, overloaded: false, retry_after: None, refused: false }
    }

    pub fn retryable(error: ModelError) -> Self {
        Self { error, retryable: true, overloaded: false, retry_after: None, refused: false }
    }
}

/// Whether an HTTP status is worth another try.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

/// Reads `retry-after-ms` or `retry-after` (seconds, possibly fractional).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let secs = get("retry-after")?.parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// Limits concurrent requests to one endpoint and holds every caller back while the
/// endpoint has asked for a pause (a `retry-after` on a 429 or 529).
#[derive(Debug)]
pub struct Limiter {
    permits: Semaphore,
    pause_until: Mutex<Option<Instant>>,
}

impl Limiter {
    pub fn new(max_concurrent: usize) -> Self {
        Self { permits: Semaphore::new(max_concurrent.max(1)), pause_until: Mutex::new(None) }
    }

    /// The limiter shared by every provider of this process that talks to `endpoint`.
    pub fn shared(endpoint: &str, max_concurrent: usize) -> Arc<Limiter> {
        static ALL: OnceLock<Mutex<HashMap<String, Arc<Limiter>>>> = OnceLock::new();
        let all = ALL.get_or_init(Default::default);
        let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(endpoint.to_string()).or_insert_with(|| Arc::new(Limiter::new(max_concurrent))).clone()
    }

    /// Waits out any pause, then takes a request slot.
    pub async fn acquire(&self) -> Result<SemaphorePermit<'_>, ModelError> {
        loop {
            let until = *self.pause_until.lock().unwrap_or_else(|e| e.into_inner());
            match until {
                Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
                _ => break,
            }
        }
        self.permits
            .acquire()
            .await
            .map_err(|_| ModelError::Config { message: "the request limiter was closed".to_string() })
    }

    /// Asks every caller to wait until `now + wait`.
    pub fn pause(&self, wait: Duration) {
        let until = Instant::now() + wait;
        let mut guard = self.pause_until.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none_or(|t| t < until) {
            *guard = Some(until);
        }
    }
}

/// One try at a model call, which [`with_retries`] repeats.
#[async_trait::async_trait]
pub trait Attempt: Send + Sync {
    async fn attempt(&self, sink: StreamSink<'_>) -> Result<ModelResponse, AttemptError>;
}

/// Runs `attempt` until it succeeds, fails for good, or runs out of tries or of time.
///
/// `give_up_on_overload_after` ends early after that many overloaded answers in a row,
/// so the caller can switch to a fallback model. `budget` bounds the time spent in
/// attempts and waits: a retry whose wait would end past it is not made.
pub async fn with_retries(
    policy: &RetryPolicy,
    limiter: &Limiter,
    give_up_on_overload_after: Option<u32>,
    budget: Duration,
    sink: StreamSink<'_>,
    attempt: &dyn Attempt,
) -> Result<ModelResponse, ModelError> {
    let started = Instant::now();
    let mut overloaded_in_a_row = 0u32;
    let mut n = 0u32;
    loop {
        n += 1;
        sink(StreamEvent::AttemptStarted { attempt: n });
        let result = {
            let _permit = limiter.acquire().await?;
            attempt.attempt(&mut *sink).await
        };
        let failure = match result {
            Ok(response) => return Ok(response),
            Err(failure) => failure,
        };
        overloaded_in_a_row = if failure.overloaded { overloaded_in_a_row + 1 } else { 0 };
        let out_of_tries = n >= policy.max_attempts || (failure.refused && n >= CONNECT_ATTEMPTS);
        let fall_back = give_up_on_overload_after.is_some_and(|limit| overloaded_in_a_row >= limit);
        if !failure.retryable || out_of_tries || fall_back {
            return Err(with_attempts(failure.error, n));
        }
        let delay = policy.delay(n, failure.retry_after);
        if started.elapsed() + delay > budget {
            tracing::debug!(attempt = n, ?budget, "model call failed; the retry budget is spent");
            return Err(out_of_budget(with_attempts(failure.error, n), budget));
        }
        if failure.retry_after.is_some() {
            limiter.pause(delay);
        }
        tracing::debug!(attempt = n, ?delay, error = %failure.error, "model call failed; retrying");
        sink(StreamEvent::Retrying { attempt: n, delay, error: failure.error.to_string() });
        tokio::time::sleep(delay).await;
    }
}

fn with_attempts(error: ModelError, n: u32) -> ModelError {
    match error {
        ModelError::RateLimited { status, message, .. } => ModelError::RateLimited { status, attempts: n, message },
        ModelError::Overloaded { status, message, .. } => ModelError::Overloaded { status, attempts: n, message },
        ModelError::Server { status, message, .. } => ModelError::Server { status, attempts: n, message },
        ModelError::Network { message, .. } => ModelError::Network { attempts: n, message },
        other => other,
    }
}

/// Notes in the error's message that the retry budget ran out.
fn out_of_budget(error: ModelError, budget: Duration) -> ModelError {
    let note = |message: String| {
        format!(
            "{message} (gave up: the retry budget of {}s is spent; raise model_settings.retry_budget to wait longer)",
            budget.as_secs_f64()
        )
    };
    match error {
        ModelError::RateLimited { status, attempts, message } => {
            ModelError::RateLimited { status, attempts, message: note(message) }
        }
        ModelError::Overloaded { status, attempts, message } => {
            ModelError::Overloaded { status, attempts, message: note(message) }
        }
        ModelError::Server { status, attempts, message } => {
            ModelError::Server { status, attempts, message: note(message) }
        }
        ModelError::Network { attempts, message } => ModelError::Network { attempts, message: note(message) },
        ModelError::Protocol { message } => ModelError::Protocol { message: note(message) },
        other => other,
    }
}

/// Classifies an HTTP error answer.
pub fn classify_status(status: u16, headers: &HeaderMap, body: &str) -> AttemptError {
    let message = super::error_message(body);
    let retry_after = retry_after(headers);
    let error = match status {
        401 | 403 => ModelError::Auth { status, message },
        413 => ModelError::PromptTooLong { message },
        400 if super::looks_like_prompt_too_long(&message) => ModelError::PromptTooLong { message },
        529 => ModelError::Overloaded { status, attempts: 1, message },
        429 => ModelError::RateLimited { status, attempts: 1, message },
        s if is_retryable_status(s) => ModelError::Server { status, attempts: 1, message },
        _ => ModelError::InvalidRequest { status, message },
    };
    AttemptError {
        retryable: is_retryable_status(status),
        overloaded: status == 529,
        retry_after,
        error,
        refused: false,
    }
}

/// Classifies a transport failure (connect, reset, body cut short).
pub fn classify_transport(err: &reqwest::Error) -> AttemptError {
    let mut message = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    if err.is_connect() {
        let url = err.url().map(|u| format!("{}://{}", u.scheme(), u.authority())).unwrap_or_default();
        let message = format!(
            "cannot connect to the model api at {url} ({message}); check that it is running there, or point orch \
             at another with ANTHROPIC_BASE_URL or OPENAI_BASE_URL"
        );
        return AttemptError { refused: true, ..AttemptError::retryable(ModelError::Network { attempts: 1, message }) };
    }
    AttemptError::retryable(ModelError::Network { attempts: 1, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            ..Default::default()
        };
        let d1 = p.delay(1, None);
        assert!(d1 >= Duration::from_millis(100) && d1 <= Duration::from_millis(125), "{d1:?}");
        let d3 = p.delay(3, None);
        assert!(d3 >= Duration::from_millis(400) && d3 <= Duration::from_millis(500), "{d3:?}");
        let d10 = p.delay(10, None);
        assert!(d10 >= Duration::from_secs(1) && d10 <= Duration::from_millis(1250), "{d10:?}");
    }

    #[test]
    fn retry_after_wins_and_is_capped() {
        let p = RetryPolicy { max_retry_after: Duration::from_secs(5), ..Default::default() };
        assert_eq!(p.delay(1, Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(p.delay(1, Some(Duration::from_secs(50))), Duration::from_secs(5));
    }

    #[test]
    fn parses_retry_after_headers() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "1.5".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        h.insert("retry-after-ms", "20".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(20)));
        let mut bad = HeaderMap::new();
        bad.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&bad), None);
    }

    #[test]
    fn one_limiter_per_endpoint_for_the_whole_process() {
        let a = Limiter::shared("http://example.test/v1/messages", 4);
        let b = Limiter::shared("http://example.test/v1/messages", 99);
        let c = Limiter::shared("http://other.test/v1/messages", 4);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
    }

    #[tokio::test]
    async fn a_pause_holds_back_every_caller() {
        let limiter = Arc::new(Limiter::new(8));
        limiter.pause(Duration::from_millis(150));
        let started = Instant::now();
        let waits = (0..3).map(|_| {
            let l = limiter.clone();
            tokio::spawn(async move {
                let _permit = l.acquire().await.unwrap();
                Instant::now()
            })
        });
        for w in waits {
            assert!(w.await.unwrap() - started >= Duration::from_millis(150));
        }
    }

    #[tokio::test]
    async fn concurrency_is_capped() {
        let limiter = Limiter::new(2);
        let _a = limiter.acquire().await.unwrap();
        let _b = limiter.acquire().await.unwrap();
        assert!(tokio::time::timeout(Duration::from_millis(50), limiter.acquire()).await.is_err());
    }

    #[test]
    fn status_classes() {
        let h = HeaderMap::new();
        assert!(!classify_status(401, &h, "{}").retryable);
        assert!(matches!(classify_status(401, &h, "{}").error, ModelError::Auth { .. }));
        let ptl = classify_status(
            400,
            &h,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        );
        assert!(matches!(ptl.error, ModelError::PromptTooLong { .. }) && !ptl.retryable);
        for s in [429, 500, 502, 503, 504, 529] {
            assert!(classify_status(s, &h, "").retryable, "{s}");
        }
        assert!(classify_status(529, &h, "").overloaded);
    }
}
