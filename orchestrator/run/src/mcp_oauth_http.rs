//! The streamable HTTP client of an MCP server behind OAuth: rmcp's reqwest client,
//! with the bearer token of [`OAuth`] on every request, and one more try with a fresh
//! token when the server answers 401 (or 403 `insufficient_scope`).

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::auth::AuthError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use sse_stream::{Error as SseError, Sse};

use crate::mcp_oauth::OAuth;

type HttpError = StreamableHttpError<reqwest::Error>;

/// reqwest, authorized by an [`OAuth`] client.
#[derive(Clone)]
pub struct OAuthHttp {
    pub http: reqwest::Client,
    pub oauth: OAuth,
}

fn refused(why: String) -> HttpError {
    StreamableHttpError::Auth(AuthError::AuthorizationFailed(why))
}

impl OAuthHttp {
    /// Runs `call` with the current token; after a 401 or 403 `insufficient_scope`,
    /// once more with a fresh one.
    async fn with_token<T, F, Fut>(&self, call: F) -> Result<T, HttpError>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        let sent = self.oauth.token().await.map_err(refused)?;
        let (challenge, step_up) = match call(sent.clone()).await {
            Err(StreamableHttpError::AuthRequired(e)) => (e.www_authenticate_header, false),
            Err(StreamableHttpError::InsufficientScope(e)) => (e.www_authenticate_header, true),
            // A 401 without a challenge: discovery starts from the well-known URLs.
            Err(StreamableHttpError::HttpStatus(e)) if e.status == 401 => (String::new(), false),
            other => return other,
        };
        let fresh = self.oauth.authorize(&challenge, sent.as_deref(), step_up).await.map_err(refused)?;
        let again = call(Some(fresh)).await;
        if let Err(StreamableHttpError::AuthRequired(_) | StreamableHttpError::InsufficientScope(_)) = &again {
            self.oauth.fail(
                "the server refused the token orch got for it from its authorization server; check the scopes and the audience the client may have (`oauth.scopes`)"
                    .into(),
            );
        }
        again
    }
}

impl StreamableHttpClient for OAuthHttp {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.with_token(|token| {
            self.http.post_message(uri.clone(), message.clone(), session_id.clone(), token, headers.clone())
        })
        .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.with_token(|token| {
            self.http.post_message_with_max_sse_event_size(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.with_token(|token| {
            self.http.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.with_token(|token| self.http.delete_session(uri.clone(), session_id.clone(), token, headers.clone())).await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.with_token(|token| {
            self.http.get_stream(uri.clone(), session_id.clone(), last_event_id.clone(), token, headers.clone())
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth: Option<String>,
        headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, HttpError> {
        self.with_token(|token| {
            self.http.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}
