//! `MultiEdit`: several `Edit` replacements in one file, applied in order and written
//! once: all of them or none. Same read-before-edit and staleness rules as `Edit`, and
//! the file keeps its line endings and encoding.

use std::path::PathBuf;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::edit::{Applied, apply, snippet, write_and_stamp};
use super::text::{self, MAX_TEXT_FILE_BYTES, TextEncoding};
use super::{Tool, ToolContext, ToolError};

/// One replacement of a `MultiEdit` call.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditOperation {
    /// The exact text to replace, as the file reads after the edits before this one.
    pub old_string: String,
    /// The text to put in its place; must differ from old_string.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    #[serde(default)]
    pub replace_all: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MultiEditInput {
    /// The file to change: an absolute path, or one relative to the working directory.
    pub file_path: String,
    /// The replacements, applied one after the other to the result of the previous one.
    #[schemars(length(min = 1))]
    pub edits: Vec<EditOperation>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct MultiEdit;

#[async_trait]
impl Tool for MultiEdit {
    type Input = MultiEditInput;
    const NAME: &'static str = "MultiEdit";

    fn description(&self) -> &'static str {
        "Make several replacements in one file in a single step. Each entry of `edits` works \
         like an Edit call (old_string, new_string, optional replace_all) and applies to the \
         text left by the entries before it, so a later entry must match what the earlier \
         ones produced. Either every entry applies and the file is written once, or none \
         does and the file stays as it was; the error names the entry that failed. As with \
         Edit, the file must have been Read in this session and be unchanged since, matches \
         are plain text, and the file keeps its line endings and encoding. To create a new \
         file, give the first entry an empty old_string and the whole content as new_string. \
         Prefer this over several Edit calls on the same file."
    }

    fn validate(&self, input: &Self::Input) -> Result<(), String> {
        if input.file_path.trim().is_empty() {
            return Err("file_path is empty; give the path of the file to edit".into());
        }
        if input.edits.is_empty() {
            return Err("edits is empty; give at least one {old_string, new_string} entry".into());
        }
        for (i, e) in input.edits.iter().enumerate() {
            if e.old_string == e.new_string {
                return Err(format!(
                    "edit {} has the same old_string and new_string, so it would change nothing",
                    i + 1
                ));
            }
            if i > 0 && e.old_string.is_empty() {
                return Err(format!(
                    "edit {} has an empty old_string; only the first edit may be empty (to create a file)",
                    i + 1
                ));
            }
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
        Tool::validate(self, &input).map_err(ToolError)?;
        let path = ctx.session.resolve(&input.file_path);
        let shown = path.display().to_string();
        let given = &input.file_path;
        let (original, encoding, exists) = match tokio::fs::metadata(&path).await {
            Ok(m) if m.is_dir() => {
                return Err(ToolError(format!("{shown} is a directory; MultiEdit needs a file path.")));
            }
            Ok(m) if !m.is_file() => {
                return Err(ToolError(format!("{shown} is not a regular file; MultiEdit only changes regular files.")));
            }
            Ok(m) if m.len() > MAX_TEXT_FILE_BYTES => {
                return Err(ToolError(format!(
                    "{shown} is {} bytes, more than MultiEdit loads ({MAX_TEXT_FILE_BYTES} bytes); change it with Bash.",
                    m.len()
                )));
            }
            Ok(_) => {
                let bytes =
                    tokio::fs::read(&path).await.map_err(|e| ToolError(text::io_error_message("read", &path, &e)))?;
                text::check_fresh(&ctx.session, &path, &bytes, given, "MultiEdit")?;
                if text::is_binary(&bytes) {
                    return Err(ToolError(format!("{shown} looks like a binary file; MultiEdit only changes text.")));
                }
                let decoded = text::decode(&bytes);
                if decoded.lossy {
                    return Err(ToolError(format!(
                        "{shown} is not valid UTF-8 or UTF-16 text, so MultiEdit cannot change it without damaging \
                         it; use Bash, or Write to replace it whole."
                    )));
                }
                (decoded.text, decoded.encoding, true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if input.edits.first().is_some_and(|e| e.old_string.is_empty()) {
                    (String::new(), TextEncoding::Utf8, false)
                } else {
                    let msg = text::missing_file_message(given, &path).await;
                    return Err(ToolError(format!(
                        "{msg} (To create it, give the first edit an empty old_string, or use Write.)"
                    )));
                }
            }
            Err(e) => return Err(ToolError(text::io_error_message("read", &path, &e))),
        };

        let mut current = original.clone();
        let mut last: Option<Applied> = None;
        let mut total = 0;
        for (i, op) in input.edits.iter().enumerate() {
            let n = i + 1;
            let applied = if op.old_string.is_empty() {
                if !current.is_empty() {
                    return Err(ToolError(format!(
                        "edit {n} of {}: old_string is empty but {shown} already has content; nothing was written.",
                        input.edits.len()
                    )));
                }
                Applied { text: op.new_string.clone(), count: 1, first: (0, op.new_string.len()), quotes: false }
            } else {
                apply(&current, &op.old_string, &op.new_string, op.replace_all.unwrap_or(false)).map_err(|e| {
                    ToolError(format!(
                        "edit {n} of {} failed, so no edit was written: {}",
                        input.edits.len(),
                        e.message(given).0
                    ))
                })?
            };
            total += applied.count;
            current = applied.text.clone();
            last = Some(applied);
        }
        if current == original && exists {
            return Err(ToolError(format!("The edits leave {shown} unchanged. Nothing was written.")));
        }
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::new("MultiEdit was cancelled before it wrote anything."));
        }
        if !exists && let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| ToolError(text::io_error_message("create the directory", parent, &e)))?;
        }
        write_and_stamp(&path, &text::encode(&current, encoding), ctx).await?;

        let edits = input.edits.len();
        let mut msg = format!(
            "{} {shown}: {edits} edit{} applied, {total} replacement{}",
            if exists { "Edited" } else { "Created" },
            if edits == 1 { "" } else { "s" },
            if total == 1 { "" } else { "s" },
        );
        let mut kept = Vec::new();
        if encoding != TextEncoding::Utf8 {
            kept.push(encoding.label());
        }
        if text::uses_crlf(&original) {
            kept.push("CRLF line endings");
        }
        if !kept.is_empty() {
            msg.push_str(&format!("; kept {}", kept.join(" and ")));
        }
        msg.push_str(".\n");
        if let Some(last) = last.filter(|_| edits == 1) {
            msg.push_str(&snippet(&current, last.first, last.count));
        }
        Ok(msg)
    }
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

    async fn read(ctx: &ToolContext, path: &str) {
        DynTool::call(&Read, json!({ "file_path": path }), ctx).await.unwrap();
    }

    async fn multi(ctx: &ToolContext, input: serde_json::Value) -> Result<String, ToolError> {
        DynTool::validate(&MultiEdit, &input).map_err(ToolError)?;
        DynTool::call(&MultiEdit, input, ctx).await
    }

    #[tokio::test]
    async fn applies_claude_code_shaped_edits_in_order() {
        let (dir, ctx) = setup();
        let file = dir.path().join("a.py");
        std::fs::write(&file, "def foo():\n    return 1\n\nfoo()\nfoo()\n").unwrap();
        let path = file.to_str().unwrap();
        read(&ctx, path).await;
        // The shape Claude Code's model sends: replace_all present on some entries only.
        let out = multi(
            &ctx,
            json!({
                "file_path": path,
                "edits": [
                    { "old_string": "def foo():", "new_string": "def bar():" },
                    { "old_string": "foo()", "new_string": "bar()", "replace_all": true },
                    { "old_string": "return 1", "new_string": "return 2", "replace_all": false }
                ]
            }),
        )
        .await
        .unwrap();
        assert!(out.contains("3 edits applied, 4 replacements"), "{out}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "def bar():\n    return 2\n\nbar()\nbar()\n");
    }

    #[tokio::test]
    async fn one_failing_edit_writes_nothing() {
        let (dir, ctx) = setup();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "one\ntwo\n").unwrap();
        let path = file.to_str().unwrap();
        read(&ctx, path).await;
        let err = multi(
            &ctx,
            json!({ "file_path": path, "edits": [
                { "old_string": "one", "new_string": "uno" },
                { "old_string": "three", "new_string": "tres" }
            ]}),
        )
        .await
        .unwrap_err();
        assert!(err.0.contains("edit 2 of 2"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\ntwo\n");
        // An ambiguous match without replace_all fails the same way.
        std::fs::write(&file, "x x\n").unwrap();
        read(&ctx, path).await;
        let err = multi(&ctx, json!({ "file_path": path, "edits": [{ "old_string": "x", "new_string": "y" }]}))
            .await
            .unwrap_err();
        assert!(err.0.contains("2 matches"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x x\n");
    }

    #[tokio::test]
    async fn later_edits_see_earlier_results() {
        let (dir, ctx) = setup();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "alpha\n").unwrap();
        let path = file.to_str().unwrap();
        read(&ctx, path).await;
        multi(
            &ctx,
            json!({ "file_path": path, "edits": [
                { "old_string": "alpha", "new_string": "beta" },
                { "old_string": "beta", "new_string": "gamma" }
            ]}),
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "gamma\n");
    }

    #[tokio::test]
    async fn needs_a_fresh_read() {
        let (dir, ctx) = setup();
        let file = dir.path().join("a.txt");
        std::fs::write(&file, "alpha\n").unwrap();
        let path = file.to_str().unwrap();
        let input = json!({ "file_path": path, "edits": [{ "old_string": "alpha", "new_string": "beta" }]});
        let err = multi(&ctx, input.clone()).await.unwrap_err();
        assert!(err.0.contains("you have not read it"), "{err}");
        read(&ctx, path).await;
        std::fs::write(&file, "alpha changed\n").unwrap();
        let err = multi(&ctx, input).await.unwrap_err();
        assert!(err.0.contains("changed on disk"), "{err}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "alpha changed\n");
    }

    #[tokio::test]
    async fn keeps_crlf_and_utf16() {
        let (dir, ctx) = setup();
        let file = dir.path().join("w.txt");
        std::fs::write(&file, encode("a\r\nb\r\nc\r\n", TextEncoding::Utf16Le)).unwrap();
        let path = file.to_str().unwrap();
        read(&ctx, path).await;
        multi(
            &ctx,
            json!({ "file_path": path, "edits": [
                { "old_string": "a\nb", "new_string": "A\nB" },
                { "old_string": "c", "new_string": "C\nD" }
            ]}),
        )
        .await
        .unwrap();
        let bytes = std::fs::read(&file).unwrap();
        let d = decode(&bytes);
        assert_eq!(d.encoding, TextEncoding::Utf16Le);
        assert_eq!(d.text, "A\r\nB\r\nC\r\nD\r\n");
    }

    #[tokio::test]
    async fn creates_a_new_file_from_an_empty_first_edit() {
        let (dir, ctx) = setup();
        let file = dir.path().join("sub/new.txt");
        let path = file.to_str().unwrap();
        multi(
            &ctx,
            json!({ "file_path": path, "edits": [
                { "old_string": "", "new_string": "hello world\n" },
                { "old_string": "world", "new_string": "there" }
            ]}),
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello there\n");
    }

    #[tokio::test]
    async fn a_multi_edit_outside_the_writable_roots_is_denied_through_the_pool() {
        use crate::permissions::Permissions;
        use crate::pipeline::ToolPool;
        use crate::tool::{ToolCall, ToolRunner};
        use crate::tools::core_tools;
        use crate::tools::host::{HostTools, InProcess};
        let (dir, ctx) = setup();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim.txt");
        std::fs::write(&victim, "keep me\n").unwrap();
        let path = victim.to_str().unwrap();
        // Even after a Read, the write is refused before it reaches the host.
        read(&ctx, path).await;
        let host = HostTools::new(core_tools(), ctx.session.clone());
        let pool =
            ToolPool::new("a", core_tools(), Arc::new(InProcess(host)), Permissions::allow_all(dir.path())).unwrap();
        let call = ToolCall {
            id: "t1".into(),
            name: "MultiEdit".into(),
            input: json!({ "file_path": path, "edits": [{ "old_string": "keep", "new_string": "lost" }] }),
        };
        let out = pool.run(&call, Default::default()).await;
        assert!(out.is_error, "{}", out.content);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    }

    #[test]
    fn rejects_bad_input() {
        let v = |i: serde_json::Value| DynTool::validate(&MultiEdit, &i);
        assert!(v(json!({ "file_path": "a", "edits": [] })).is_err());
        assert!(v(json!({ "file_path": "a", "edits": [{ "old_string": "x", "new_string": "x" }] })).is_err());
        assert!(v(json!({ "file_path": "a", "edits": [{ "old_string": "x" }] })).is_err());
        assert!(
            v(json!({ "file_path": "a", "edits": [{ "old_string": "x", "new_string": "y" }, { "old_string": "", "new_string": "z" }] }))
                .is_err()
        );
        let schema = DynTool::input_schema(&MultiEdit);
        assert_eq!(schema["required"], json!(["file_path", "edits"]));
    }
}
