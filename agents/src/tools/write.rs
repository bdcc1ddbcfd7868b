//! `Write`: creates a file, or replaces a file the agent has read, whole.

use std::path::PathBuf;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::text::{self, TextEncoding};
use super::{FileStamp, Tool, ToolContext, ToolError};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteInput {
    /// The file to write: an absolute path, or one relative to the working directory.
    /// Missing parent directories are created.
    pub file_path: String,
    /// The complete new content of the file, written exactly as given.
    pub content: String,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Write;

#[async_trait]
impl Tool for Write {
    type Input = WriteInput;
    const NAME: &'static str = "Write";

    fn description(&self) -> &'static str {
        "Write a whole file: create it (with any missing parent directories), or replace \
         all of its content. An existing file must have been Read in this session first, and \
         must not have changed since that Read; otherwise the call is refused and you \
         should Read it (again). To change part of an existing file, prefer Edit, which \
         sends only the change. The content is written exactly as given, line endings \
         included; an existing file keeps its encoding (UTF-8, UTF-8 with BOM, or UTF-16 \
         with BOM), and a new file is UTF-8. Only create files the task needs."
    }

    fn validate(&self, input: &Self::Input) -> Result<(), String> {
        if input.file_path.trim().is_empty() {
            return Err("file_path is empty; give the path of the file to write".into());
        }
        Ok(())
    }

    fn permission_subject(&self, input: &Self::Input) -> Option<String> {
        Some(input.file_path.clone())
    }

    fn writes(&self, input: &Self::Input) -> Vec<PathBuf> {
        vec![PathBuf::from(&input.file_path)]
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = ctx.session.resolve(&input.file_path);
        let shown_path = path.display();
        let existing = match tokio::fs::metadata(&path).await {
            Ok(m) if m.is_dir() => {
                return Err(ToolError(format!("{shown_path} is a directory; Write needs a file path.")));
            }
            Ok(m) if !m.is_file() => {
                return Err(ToolError(format!(
                    "{shown_path} is not a regular file (a device, socket or pipe); Write only writes regular files."
                )));
            }
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(ToolError(text::io_error_message("inspect", &path, &e))),
        };

        let encoding = if existing {
            let old = tokio::fs::read(&path).await.map_err(|e| ToolError(text::io_error_message("read", &path, &e)))?;
            text::check_fresh(&ctx.session, &path, &old, &input.file_path, "Write")?;
            TextEncoding::sniff(&old)
        } else {
            TextEncoding::Utf8
        };

        if ctx.cancel.is_cancelled() {
            return Err(ToolError::new("Write was cancelled before it wrote anything."));
        }
        if let Some(parent) = path.parent()
            && !existing
        {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| ToolError(text::io_error_message("create the directory", parent, &e)))?;
        }
        let bytes = text::encode(&input.content, encoding);
        tokio::fs::write(&path, &bytes).await.map_err(|e| ToolError(text::io_error_message("write", &path, &e)))?;
        let metadata =
            tokio::fs::metadata(&path).await.map_err(|e| ToolError(text::io_error_message("inspect", &path, &e)))?;
        ctx.session.record_read(&path, FileStamp::of(&bytes, &metadata));

        let lines = text::split_lines(&input.content).len();
        let verb = if existing { "Overwrote" } else { "Created" };
        let kept = if encoding == TextEncoding::Utf8 { String::new() } else { format!(", kept {}", encoding.label()) };
        Ok(format!("{verb} {shown_path} ({lines} line{}, {} bytes{kept}).", plural(lines), bytes.len()))
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::text::{decode, encode};
    use crate::tools::{DynTool, Session, read::Read};
    use serde_json::json;
    use std::sync::Arc;

    fn setup() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext { session: Arc::new(Session::new(dir.path())), cancel: Default::default() };
        (dir, ctx)
    }

    async fn write(ctx: &ToolContext, input: serde_json::Value) -> Result<String, ToolError> {
        DynTool::call(&Write, input, ctx).await
    }

    async fn read(ctx: &ToolContext, path: &str) {
        DynTool::call(&Read, json!({"file_path": path}), ctx).await.unwrap();
    }

    #[tokio::test]
    async fn creates_files_and_parent_directories() {
        let (dir, ctx) = setup();
        let out = write(&ctx, json!({"file_path": "a/b/new.txt", "content": "one\ntwo\n"})).await.unwrap();
        assert!(out.starts_with("Created") && out.contains("2 lines"), "{out}");
        let path = dir.path().join("a/b/new.txt");
        assert_eq!(std::fs::read(&path).unwrap(), b"one\ntwo\n");
        // The fresh stamp lets a second Write (or an Edit) follow without a Read.
        assert!(ctx.session.last_read(&path).unwrap().matches(b"one\ntwo\n"));
        let out = write(&ctx, json!({"file_path": "a/b/new.txt", "content": "x"})).await.unwrap();
        assert!(out.starts_with("Overwrote") && out.contains("1 line,"), "{out}");
        assert_eq!(std::fs::read(&path).unwrap(), b"x");
    }

    #[tokio::test]
    async fn refuses_to_overwrite_an_unread_file() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("f"), "keep me").unwrap();
        let err = write(&ctx, json!({"file_path": "f", "content": "gone"})).await.unwrap_err();
        assert!(err.0.contains("Read it first"), "{err}");
        // It says exactly which call to make, then to repeat this one.
        let path = dir.path().join("f");
        assert!(err.0.contains(&format!("Read with file_path \"{}\"", path.display())), "{err}");
        assert!(err.0.contains("then send the same Write call again"), "{err}");
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"keep me");
        read(&ctx, "f").await;
        let out = write(&ctx, json!({"file_path": "f", "content": "replaced\n"})).await.unwrap();
        assert!(out.starts_with("Overwrote"), "{out}");
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"replaced\n");
    }

    #[tokio::test]
    async fn refuses_a_file_changed_since_it_was_read() {
        let (dir, ctx) = setup();
        let path = dir.path().join("f");
        std::fs::write(&path, "aaaa\n").unwrap();
        read(&ctx, "f").await;
        // Same length, so only the content hash can tell.
        std::fs::write(&path, "bbbb\n").unwrap();
        let err = write(&ctx, json!({"file_path": "f", "content": "mine"})).await.unwrap_err();
        assert!(err.0.contains("changed") && err.0.contains("Read it again"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"bbbb\n");
        read(&ctx, "f").await;
        assert!(write(&ctx, json!({"file_path": "f", "content": "mine"})).await.is_ok());
    }

    #[tokio::test]
    async fn keeps_the_encoding_of_an_existing_file() {
        let (dir, ctx) = setup();
        let path = dir.path().join("w.txt");
        std::fs::write(&path, encode("old\r\n", TextEncoding::Utf16Le)).unwrap();
        read(&ctx, "w.txt").await;
        let out = write(&ctx, json!({"file_path": "w.txt", "content": "n\u{e9}w\r\n"})).await.unwrap();
        assert!(out.contains("UTF-16LE"), "{out}");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes, encode("n\u{e9}w\r\n", TextEncoding::Utf16Le));
        assert_eq!(&bytes[..2], &[0xFF, 0xFE]);
        assert_eq!(decode(&bytes).text, "n\u{e9}w\r\n");
    }

    #[tokio::test]
    async fn refuses_directories() {
        let (dir, ctx) = setup();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let err = write(&ctx, json!({"file_path": "d", "content": ""})).await.unwrap_err();
        assert!(err.0.contains("directory"), "{err}");
    }

    #[test]
    fn validates_and_declares_what_it_writes() {
        assert!(DynTool::validate(&Write, &json!({"file_path": " ", "content": "x"})).unwrap_err().contains("empty"));
        assert!(DynTool::validate(&Write, &json!({"file_path": "a"})).is_err());
        let ok = json!({"file_path": "src/a.rs", "content": ""});
        assert!(DynTool::validate(&Write, &ok).is_ok());
        assert_eq!(DynTool::writes(&Write, &ok), vec![PathBuf::from("src/a.rs")]);
        assert_eq!(DynTool::permission_subject(&Write, &ok).as_deref(), Some("src/a.rs"));
        assert!(!DynTool::is_read_only(&Write, &ok));
        assert!(!DynTool::is_concurrency_safe(&Write, &ok));
    }
}
