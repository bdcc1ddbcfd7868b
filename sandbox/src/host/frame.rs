//! The tool host wire format: newline-delimited JSON, one message per line.
//!
//! Owns the message types in both directions ([`ToHost`], [`FromHost`]), their encoding
//! (with the frame size limit checked before anything is written) and [`FrameReader`],
//! which splits a byte stream into frames without ever buffering more than the limit.
//!
//! ```text
//! coordinator -> host   {"op":"call","id":7,"payload":{...}}
//!                       {"op":"cancel","id":7}
//!                       {"op":"shutdown"}
//! host -> coordinator   {"op":"ready","pid":4242}            once, first
//!                       {"op":"result","id":7,"payload":{...}}
//!                       {"op":"error","id":7,"message":"..."}
//! ```
//!
//! serde_json escapes control characters inside strings, so an encoded message never
//! contains a raw newline. Blank lines are ignored. A frame is at most
//! [`MAX_FRAME_BYTES`] bytes, not counting its newline.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// The default largest frame, in bytes, not counting the newline.
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// A message from the coordinator to the tool host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ToHost {
    /// Run one unit of work. The host answers with exactly one `result` or `error`
    /// carrying the same id.
    Call { id: u64, payload: Value },
    /// Cancel the call with this id. The host still answers it (usually with an error),
    /// but the coordinator need not wait for that answer.
    Cancel { id: u64 },
    /// Cancel every call, answer what finishes within the grace period, and exit.
    Shutdown,
}

/// A message from the tool host to the coordinator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FromHost {
    /// Sent once, before anything else: the host is listening.
    Ready { pid: u32 },
    /// The call with this id succeeded.
    Result { id: u64, payload: Value },
    /// The call with this id failed; `message` says why.
    Error { id: u64, message: String },
}

/// Why a frame could not be read, encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size} bytes or more is over the limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("the stream ended in the middle of a frame ({0} bytes without a newline)")]
    Truncated(usize),
    #[error("malformed frame: {0}")]
    Malformed(#[from] serde_json::Error),
    #[error("reading frames failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Encodes one message as a frame (JSON plus a newline), refusing anything over `limit`.
pub fn encode<T: Serialize>(message: &T, limit: usize) -> Result<Vec<u8>, FrameError> {
    let mut bytes = serde_json::to_vec(message)?;
    if bytes.len() > limit {
        return Err(FrameError::TooLarge { size: bytes.len(), limit });
    }
    bytes.push(b'\n');
    Ok(bytes)
}

/// Decodes one frame (without its newline).
pub fn decode<T: DeserializeOwned>(frame: &[u8]) -> Result<T, FrameError> {
    Ok(serde_json::from_slice(frame)?)
}

/// Splits a byte stream into frames of at most `limit` bytes.
///
/// [`FrameReader::next`] is cancel-safe: a partial frame is kept in the reader, so it can
/// be polled in `tokio::select!` without losing data. After [`FrameError::TooLarge`] the
/// reader skips the rest of that line on the next call, so a caller may carry on.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: BufReader<R>,
    limit: usize,
    partial: Vec<u8>,
    skipping: bool,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(inner: R, limit: usize) -> Self {
        Self { inner: BufReader::with_capacity(64 * 1024, inner), limit, partial: Vec::new(), skipping: false }
    }

    /// The next non-blank frame, without its newline; `None` at a clean end of stream.
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>, FrameError> {
        loop {
            let buf = self.inner.fill_buf().await?;
            if buf.is_empty() {
                let rest = std::mem::take(&mut self.partial);
                if self.skipping || is_blank(&rest) {
                    self.skipping = false;
                    return Ok(None);
                }
                return Err(FrameError::Truncated(rest.len()));
            }
            let newline = buf.iter().position(|&b| b == b'\n');
            let take = newline.unwrap_or(buf.len());
            if self.skipping {
                self.skipping = newline.is_none();
            } else if self.partial.len() + take > self.limit {
                let size = self.partial.len() + take;
                self.partial = Vec::new();
                self.skipping = newline.is_none();
                let consumed = newline.map_or(take, |i| i + 1);
                self.inner.consume(consumed);
                return Err(FrameError::TooLarge { size, limit: self.limit });
            } else {
                self.partial.extend_from_slice(&buf[..take]);
            }
            let consumed = newline.map_or(take, |i| i + 1);
            self.inner.consume(consumed);
            if newline.is_some() {
                let line = std::mem::take(&mut self.partial);
                if !is_blank(&line) {
                    return Ok(Some(line));
                }
            }
        }
    }
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

/// A short, printable excerpt of a frame for logs and error messages.
pub(crate) fn excerpt(frame: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(&frame[..frame.len().min(MAX)]);
    let text = text.trim_end();
    if frame.len() > MAX { format!("{text}…") } else { text.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::AsyncWriteExt;

    #[test]
    fn messages_have_the_documented_shape() {
        let cases = [
            (
                serde_json::to_value(ToHost::Call { id: 7, payload: json!({"a": 1}) }).unwrap(),
                json!({"op": "call", "id": 7, "payload": {"a": 1}}),
            ),
            (serde_json::to_value(ToHost::Cancel { id: 7 }).unwrap(), json!({"op": "cancel", "id": 7})),
            (serde_json::to_value(ToHost::Shutdown).unwrap(), json!({"op": "shutdown"})),
            (serde_json::to_value(FromHost::Ready { pid: 42 }).unwrap(), json!({"op": "ready", "pid": 42})),
            (
                serde_json::to_value(FromHost::Result { id: 7, payload: json!([1]) }).unwrap(),
                json!({"op": "result", "id": 7, "payload": [1]}),
            ),
            (
                serde_json::to_value(FromHost::Error { id: 7, message: "no".into() }).unwrap(),
                json!({"op": "error", "id": 7, "message": "no"}),
            ),
        ];
        for (got, want) in cases {
            assert_eq!(got, want);
        }
    }

    #[test]
    fn encoding_is_one_line_and_round_trips() {
        let message = ToHost::Call { id: 1, payload: json!({"text": "a\nb\r\n\u{2028}"}) };
        let frame = encode(&message, MAX_FRAME_BYTES).unwrap();
        assert_eq!(frame.iter().filter(|&&b| b == b'\n').count(), 1);
        assert_eq!(frame.last(), Some(&b'\n'));
        let back: ToHost = decode(&frame[..frame.len() - 1]).unwrap();
        assert_eq!(back, message);
    }

    #[test]
    fn encoding_refuses_oversize_frames() {
        let message = FromHost::Result { id: 1, payload: json!("x".repeat(100)) };
        assert!(matches!(encode(&message, 50), Err(FrameError::TooLarge { limit: 50, .. })));
    }

    #[test]
    fn unknown_op_and_missing_fields_are_malformed() {
        assert!(decode::<ToHost>(br#"{"op":"launch","id":1}"#).is_err());
        assert!(decode::<ToHost>(br#"{"op":"call","id":1}"#).is_err());
        assert!(decode::<ToHost>(b"not json").is_err());
    }

    #[tokio::test]
    async fn reader_splits_frames_across_partial_writes() {
        let (mut w, r) = tokio::io::duplex(8);
        let writer = tokio::spawn(async move {
            for chunk in [&b"{\"a\""[..], b":1}\n\n  \n{\"b\":2}", b"\n{\"c\":3}\n"] {
                w.write_all(chunk).await.unwrap();
            }
        });
        let mut reader = FrameReader::new(r, 1024);
        assert_eq!(reader.next().await.unwrap().unwrap(), br#"{"a":1}"#);
        assert_eq!(reader.next().await.unwrap().unwrap(), br#"{"b":2}"#);
        assert_eq!(reader.next().await.unwrap().unwrap(), br#"{"c":3}"#);
        writer.await.unwrap();
        assert!(reader.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn reader_rejects_oversize_frames_and_then_recovers() {
        let mut input = Vec::new();
        input.extend_from_slice(&[b'x'; 100_000]);
        input.extend_from_slice(b"\n{\"ok\":true}\n");
        let mut reader = FrameReader::new(&input[..], 1000);
        assert!(matches!(reader.next().await, Err(FrameError::TooLarge { limit: 1000, .. })));
        assert_eq!(reader.next().await.unwrap().unwrap(), br#"{"ok":true}"#);
        assert!(reader.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn reader_reports_a_truncated_last_frame() {
        let mut reader = FrameReader::new(&b"{\"a\":1}\n{\"b\""[..], 1000);
        assert!(reader.next().await.unwrap().is_some());
        assert!(matches!(reader.next().await, Err(FrameError::Truncated(4))));
        assert!(reader.next().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_frame_of_exactly_the_limit_is_accepted() {
        let mut reader = FrameReader::new(&b"12345\n123456\n"[..], 5);
        assert_eq!(reader.next().await.unwrap().unwrap(), b"12345");
        assert!(matches!(reader.next().await, Err(FrameError::TooLarge { size: 6, limit: 5 })));
    }
}
