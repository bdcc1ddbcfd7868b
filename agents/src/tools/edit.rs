//! `Edit`: replaces exact text in a file the agent has read, keeping the file's line
//! endings and encoding.

use std::path::PathBuf;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::text::{self, MAX_TEXT_FILE_BYTES, TextEncoding};
use super::{FileStamp, Tool, ToolContext, ToolError};

/// Lines of context shown around the first change.
const SNIPPET_CONTEXT: usize = 3;
/// The snippet never shows more lines than this.
const SNIPPET_MAX_LINES: usize = 16;
/// Snippet lines are cut at this many characters.
const SNIPPET_LINE_CHARS: usize = 240;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditInput {
    /// The file to change: an absolute path, or one relative to the working directory.
    pub file_path: String,
    /// The exact text to replace, without Read's line-number prefixes; must occur once unless replace_all.
    pub old_string: String,
    /// The text to put in its place; must differ from old_string. Empty deletes it.
    pub new_string: String,
    /// Replace every occurrence of old_string rather than requiring exactly one (default false).
    pub replace_all: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Edit;

#[async_trait]
impl Tool for Edit {
    type Input = EditInput;
    const NAME: &'static str = "Edit";

    fn description(&self) -> &'static str {
        "Replace text in a file: old_string is found in the file and replaced by \
         new_string, as plain text (no regular expressions; `$` and backslashes are \
         literal). The file must have been Read in this session and must not have changed \
         since; otherwise Read it (again) first. old_string must match the file exactly, \
         indentation included, and without the line-number prefixes Read shows. It must \
         occur exactly once: if it occurs several times, add surrounding lines to make it \
         unique, or set replace_all to change every occurrence (for example to rename \
         something). Line endings need no care: LF in old_string also matches a CRLF file, \
         and the file keeps its CRLF or LF endings and its encoding. Curly and straight \
         quotes are matched alike when the exact text is not found. An empty old_string \
         creates a file that does not exist yet (or fills an empty one) with new_string. \
         The result shows the changed lines with their numbers."
    }

    fn validate(&self, input: &Self::Input) -> Result<(), String> {
        if input.file_path.trim().is_empty() {
            return Err("file_path is empty; give the path of the file to edit".into());
        }
        if input.old_string == input.new_string {
            return Err("old_string and new_string are the same, so the edit would change nothing".into());
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
        let shown_path = path.display().to_string();
        let given = &input.file_path;
        let metadata = match tokio::fs::metadata(&path).await {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if input.old_string.is_empty() {
                    return create(&path, &input.new_string, ctx).await;
                }
                let msg = text::missing_file_message(given, &path).await;
                return Err(ToolError(format!("{msg} (To create a new file, use Write.)")));
            }
            Err(e) => return Err(ToolError(text::io_error_message("read", &path, &e))),
        };
        if metadata.is_dir() {
            return Err(ToolError(format!("{shown_path} is a directory; Edit needs a file path.")));
        }
        if !metadata.is_file() {
            return Err(ToolError(format!(
                "{shown_path} is not a regular file (a device, socket or pipe); Edit only changes regular files."
            )));
        }
        if metadata.len() > MAX_TEXT_FILE_BYTES {
            return Err(ToolError(format!(
                "{shown_path} is {} bytes, more than Edit loads ({MAX_TEXT_FILE_BYTES} bytes); change it with Bash.",
                metadata.len()
            )));
        }
        let bytes = tokio::fs::read(&path).await.map_err(|e| ToolError(text::io_error_message("read", &path, &e)))?;
        text::check_fresh(&ctx.session, &path, &bytes, given, "Edit")?;
        if text::is_binary(&bytes) {
            return Err(ToolError(format!(
                "{shown_path} looks like a binary file (it has NUL bytes); Edit only changes text."
            )));
        }
        let decoded = text::decode(&bytes);
        if decoded.lossy {
            return Err(ToolError(format!(
                "{shown_path} is not valid UTF-8 or UTF-16 text, so Edit cannot change it without damaging the \
                 bytes it cannot decode. Use Bash (for example sed or a script) to change it, or Write to replace it whole."
            )));
        }

        let replace_all = input.replace_all.unwrap_or(false);
        let edit = if input.old_string.is_empty() {
            if !decoded.text.is_empty() {
                return Err(ToolError(format!(
                    "old_string is empty, but {shown_path} already has content. Give the exact text to replace \
                     (to insert, include a neighbouring line in old_string and new_string), or use Write to \
                     replace the whole file."
                )));
            }
            Applied { text: input.new_string.clone(), count: 1, first: (0, input.new_string.len()), quotes: false }
        } else {
            apply(&decoded.text, &input.old_string, &input.new_string, replace_all).map_err(|e| e.message(given))?
        };
        if edit.text == decoded.text {
            return Err(ToolError(format!(
                "The replacement leaves {shown_path} unchanged (new_string equals the matched text once the file's \
                 quote style is applied). Nothing was written."
            )));
        }

        if ctx.cancel.is_cancelled() {
            return Err(ToolError::new("Edit was cancelled before it wrote anything."));
        }
        let out = text::encode(&edit.text, decoded.encoding);
        write_and_stamp(&path, &out, ctx).await?;

        let mut kept = Vec::new();
        if decoded.encoding != TextEncoding::Utf8 {
            kept.push(decoded.encoding.label());
        }
        if text::uses_crlf(&decoded.text) {
            kept.push("CRLF line endings");
        }
        let mut msg =
            format!("Edited {shown_path}: {} replacement{}", edit.count, if edit.count == 1 { "" } else { "s" });
        if edit.quotes {
            msg.push_str(" (old_string matched once curly and straight quotes were treated alike)");
        }
        if !kept.is_empty() {
            msg.push_str(&format!("; kept {}", kept.join(" and ")));
        }
        msg.push_str(".\n");
        msg.push_str(&snippet(&edit.text, edit.first, edit.count));
        Ok(msg)
    }
}

/// Creates a missing file with `content` (the empty-`old_string` case).
async fn create(path: &std::path::Path, content: &str, ctx: &ToolContext) -> Result<String, ToolError> {
    if ctx.cancel.is_cancelled() {
        return Err(ToolError::new("Edit was cancelled before it wrote anything."));
    }
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| ToolError(text::io_error_message("create the directory", parent, &e)))?;
    }
    write_and_stamp(path, content.as_bytes(), ctx).await?;
    let lines = text::split_lines(content).len();
    Ok(format!("Created {} with new_string ({lines} line{}).", path.display(), if lines == 1 { "" } else { "s" }))
}

pub(super) async fn write_and_stamp(path: &std::path::Path, bytes: &[u8], ctx: &ToolContext) -> Result<(), ToolError> {
    tokio::fs::write(path, bytes).await.map_err(|e| ToolError(text::io_error_message("write", path, &e)))?;
    let metadata =
        tokio::fs::metadata(path).await.map_err(|e| ToolError(text::io_error_message("inspect", path, &e)))?;
    ctx.session.record_read(path, FileStamp::of(bytes, &metadata));
    Ok(())
}

/// A successful replacement.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Applied {
    /// The whole new text.
    pub(super) text: String,
    pub(super) count: usize,
    /// Byte range of the first replacement in `text`.
    pub(super) first: (usize, usize),
    /// The match needed quote normalization.
    pub(super) quotes: bool,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum EditError {
    NotFound { line_numbers: bool },
    Ambiguous(usize),
}

impl EditError {
    pub(super) fn message(&self, given: &str) -> ToolError {
        match self {
            Self::NotFound { line_numbers } => {
                let mut msg = format!(
                    "old_string was not found in {given}. It must match the file exactly, including whitespace \
                     and indentation; Read the file again to copy the current text."
                );
                if *line_numbers {
                    msg.push_str(
                        " old_string seems to start with the line-number prefix Read shows (digits and a tab); \
                         leave that prefix out.",
                    );
                }
                ToolError(msg)
            }
            Self::Ambiguous(n) => ToolError(format!(
                "found {n} matches of old_string in {given}, but replace_all is false. Pass replace_all: true \
                 to replace all {n}, or add surrounding context to old_string to make it unique."
            )),
        }
    }
}

/// Replaces `old` by `new` in `text`: exact (line endings aside) first, then with curly
/// and straight quotes treated alike. Spliced as plain strings; nothing is a pattern.
pub(super) fn apply(text: &str, old: &str, new: &str, replace_all: bool) -> Result<Applied, EditError> {
    let has_curly = |s: &str| s.contains(CURLY);
    let stages: &[bool] = if has_curly(text) || has_curly(old) { &[false, true] } else { &[false] };
    for &quotes in stages {
        let view = View::new(text, quotes);
        let needle = View::new(old, quotes).text;
        let starts: Vec<usize> = view.text.match_indices(needle.as_str()).map(|(i, _)| i).collect();
        if starts.is_empty() {
            continue;
        }
        if starts.len() > 1 && !replace_all {
            return Err(EditError::Ambiguous(starts.len()));
        }
        let dominant_crlf = text::uses_crlf(text);
        let mut out = String::with_capacity(text.len() + starts.len() * new.len());
        let mut first = (0, 0);
        let mut last = 0;
        for (i, start) in starts.iter().enumerate() {
            let from = view.to_original(*start);
            let to = view.to_original(start + needle.len());
            let span = &text[from..to];
            let replacement = adapt(new, span, old, dominant_crlf, quotes);
            out.push_str(&text[last..from]);
            if i == 0 {
                first = (out.len(), out.len() + replacement.len());
            }
            out.push_str(&replacement);
            last = to;
        }
        out.push_str(&text[last..]);
        return Ok(Applied { text: out, count: starts.len(), first, quotes });
    }
    let line_numbers = old.lines().next().is_some_and(|l| {
        let t = l.trim_start();
        let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        digits > 0 && t[digits..].starts_with('\t')
    });
    Err(EditError::NotFound { line_numbers })
}

const CURLY: [char; 4] = ['\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}'];

fn straight(c: char) -> Option<char> {
    match c {
        '\u{2018}' | '\u{2019}' => Some('\''),
        '\u{201C}' | '\u{201D}' => Some('"'),
        _ => None,
    }
}

/// A normalized copy of a text (CRLF folded to LF, and optionally curly quotes made
/// straight) that can map its byte offsets back to the original.
struct View {
    text: String,
    /// For each substitution: its offset in `text`, and the total number of bytes the
    /// original had beyond `text` up to and including it.
    subs: Vec<(usize, usize)>,
}

impl View {
    fn new(original: &str, quotes: bool) -> Self {
        let mut text = String::with_capacity(original.len());
        let mut subs = Vec::new();
        let mut extra = 0;
        let mut chars = original.char_indices().peekable();
        while let Some((_, c)) = chars.next() {
            if c == '\r' && chars.peek().is_some_and(|&(_, n)| n == '\n') {
                chars.next();
                extra += 1;
                subs.push((text.len(), extra));
                text.push('\n');
            } else if let Some(s) = straight(c).filter(|_| quotes) {
                extra += c.len_utf8() - 1;
                subs.push((text.len(), extra));
                text.push(s);
            } else {
                text.push(c);
            }
        }
        Self { text, subs }
    }

    /// The original offset of normalized offset `at` (a char boundary of `text`).
    fn to_original(&self, at: usize) -> usize {
        match self.subs.partition_point(|&(pos, _)| pos < at) {
            0 => at,
            i => at + self.subs[i - 1].1,
        }
    }
}

/// `new` fitted to the matched `span`: its line endings (CRLF if the span has them, LF if
/// the span has plain LF, else the file's usual ending) and, after a quote-normalized
/// match, the span's quote style.
fn adapt(new: &str, span: &str, old: &str, dominant_crlf: bool, quotes: bool) -> String {
    let mut out = new.replace("\r\n", "\n");
    if quotes {
        out = restyle_quotes(&out, span, old);
    }
    let crlf = if span.contains("\r\n") {
        true
    } else if span.contains('\n') {
        false
    } else {
        dominant_crlf
    };
    if crlf { out.replace('\n', "\r\n") } else { out }
}

/// Gives `new` the quote style of `span`: straight quotes become curly ones of the kind
/// (single or double) the span writes curly; and where the span writes a kind straight
/// while `old` had it curly, curly ones in `new` become straight.
fn restyle_quotes(new: &str, span: &str, old: &str) -> String {
    let span_curly_double = span.contains(['\u{201C}', '\u{201D}']);
    let span_curly_single = span.contains(['\u{2018}', '\u{2019}']);
    let straighten_double = !span_curly_double && span.contains('"') && old.contains(['\u{201C}', '\u{201D}']);
    let straighten_single = !span_curly_single && span.contains('\'') && old.contains(['\u{2018}', '\u{2019}']);
    let chars: Vec<char> = new.chars().collect();
    let opens = |i: usize| {
        i == 0 || {
            let p = chars[i - 1];
            p.is_whitespace() || "([{<\u{2014}\u{2013}-".contains(p)
        }
    };
    let mut out = String::with_capacity(new.len());
    for (i, &c) in chars.iter().enumerate() {
        let styled = match c {
            '"' if span_curly_double => {
                if opens(i) {
                    '\u{201C}'
                } else {
                    '\u{201D}'
                }
            }
            '\'' if span_curly_single => {
                let between_letters =
                    i > 0 && chars[i - 1].is_alphanumeric() && chars.get(i + 1).is_some_and(|n| n.is_alphanumeric());
                if !between_letters && opens(i) { '\u{2018}' } else { '\u{2019}' }
            }
            '\u{201C}' | '\u{201D}' if straighten_double => '"',
            '\u{2018}' | '\u{2019}' if straighten_single => '\'',
            other => other,
        };
        out.push(styled);
    }
    out
}

/// A few numbered lines of `text` around the byte range `first`.
pub(super) fn snippet(text: &str, first: (usize, usize), count: usize) -> String {
    let lines = text::split_lines(text);
    if lines.is_empty() {
        return "The file is now empty.\n".to_owned();
    }
    let start_line = text[..first.0].matches('\n').count() + 1;
    // A replacement ending in a newline ends on the line before the one that follows it.
    let end_byte = if first.1 > first.0 && text[..first.1].ends_with('\n') { first.1 - 1 } else { first.1 };
    let end_line = text[..end_byte.max(first.0)].matches('\n').count() + 1;
    let from = start_line.saturating_sub(SNIPPET_CONTEXT).max(1);
    let to = (end_line + SNIPPET_CONTEXT).min(lines.len());
    let shown_to = to.min(from + SNIPPET_MAX_LINES - 1);
    let which = if count > 1 { "the first replacement" } else { "the edit" };
    let mut out = format!("Lines {from}-{shown_to} after {which}:\n");
    for n in from..=shown_to {
        let line = lines.get(n - 1).copied().unwrap_or("");
        match line.char_indices().nth(SNIPPET_LINE_CHARS) {
            Some((at, _)) => out.push_str(&format!("{n}\t{}…\n", &line[..at])),
            None => out.push_str(&format!("{n}\t{line}\n")),
        }
    }
    if shown_to < to {
        out.push_str("   ...\t(more changed lines not shown)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::text::{decode, encode};
    use crate::tools::{DynTool, Session, read::Read, write::Write};
    use serde_json::json;
    use std::path::Path;
    use std::sync::Arc;

    fn setup() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext { session: Arc::new(Session::new(dir.path())), cancel: Default::default() };
        (dir, ctx)
    }

    async fn edit(ctx: &ToolContext, input: serde_json::Value) -> Result<String, ToolError> {
        DynTool::call(&Edit, input, ctx).await
    }

    async fn read(ctx: &ToolContext, path: &str) {
        DynTool::call(&Read, json!({"file_path": path}), ctx).await.unwrap();
    }

    /// Writes `bytes` to `name` and Reads it.
    async fn prepared(dir: &Path, ctx: &ToolContext, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        read(ctx, name).await;
        path
    }

    fn e(path: &str, old: &str, new: &str) -> serde_json::Value {
        json!({"file_path": path, "old_string": old, "new_string": new})
    }

    #[tokio::test]
    async fn replaces_a_unique_match_and_shows_numbered_lines() {
        let (dir, ctx) = setup();
        let path = prepared(dir.path(), &ctx, "m.rs", b"fn a() {}\nfn b() {}\nfn c() {}\n").await;
        let out = edit(&ctx, e("m.rs", "fn b() {}", "fn bee() {}")).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"fn a() {}\nfn bee() {}\nfn c() {}\n");
        assert!(out.starts_with(&format!("Edited {}: 1 replacement.", path.display())), "{out}");
        assert!(out.contains("\n2\tfn bee() {}\n") && out.contains("\n1\tfn a() {}\n"), "{out}");
        // The fresh stamp lets a second edit follow without another Read.
        edit(&ctx, e("m.rs", "fn c() {}", "")).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"fn a() {}\nfn bee() {}\n\n");
    }

    #[tokio::test]
    async fn requires_a_prior_read() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("f"), "abc\n").unwrap();
        let err = edit(&ctx, e("f", "abc", "xyz")).await.unwrap_err();
        assert!(err.0.contains("Read it first"), "{err}");
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"abc\n");
    }

    #[tokio::test]
    async fn refuses_a_file_changed_since_it_was_read() {
        let (dir, ctx) = setup();
        let path = prepared(dir.path(), &ctx, "f", b"value = 1\n").await;
        std::fs::write(&path, "value = 2\n").unwrap();
        let err = edit(&ctx, e("f", "value", "v")).await.unwrap_err();
        assert!(err.0.contains("changed") && err.0.contains("Read it again"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"value = 2\n");
    }

    #[tokio::test]
    async fn refuses_missing_and_ambiguous_matches() {
        let (dir, ctx) = setup();
        let path = prepared(dir.path(), &ctx, "f", b"x = 1\nx = 1\nx = 1\n").await;
        let err = edit(&ctx, e("f", "y = 1", "y = 2")).await.unwrap_err();
        assert!(err.0.contains("not found"), "{err}");
        let err = edit(&ctx, e("f", "     2\tx = 1", "x = 2")).await.unwrap_err();
        assert!(err.0.contains("line-number prefix"), "{err}");
        let err = edit(&ctx, e("f", "x = 1", "x = 2")).await.unwrap_err();
        assert!(err.0.contains("found 3 matches") && err.0.contains("replace_all"), "{err}");
        assert!(err.0.contains("make it unique"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"x = 1\nx = 1\nx = 1\n");
        let all = json!({"file_path": "f", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true});
        let out = edit(&ctx, all).await.unwrap();
        assert!(out.contains("3 replacements") && out.contains("first replacement"), "{out}");
        assert_eq!(std::fs::read(&path).unwrap(), b"x = 2\nx = 2\nx = 2\n");
    }

    #[tokio::test]
    async fn missing_file_and_empty_old_string() {
        let (dir, ctx) = setup();
        let err = edit(&ctx, e("nope.txt", "a", "b")).await.unwrap_err();
        assert!(err.0.contains("does not exist") && err.0.contains("nope.txt"), "{err}");
        let out = edit(&ctx, e("new/dir/f.txt", "", "hello\n")).await.unwrap();
        assert!(out.starts_with("Created"), "{out}");
        let path = dir.path().join("new/dir/f.txt");
        assert_eq!(std::fs::read(&path).unwrap(), b"hello\n");
        let err = edit(&ctx, e("new/dir/f.txt", "", "more")).await.unwrap_err();
        assert!(err.0.contains("already has content"), "{err}");
        let empty = prepared(dir.path(), &ctx, "empty", b"").await;
        edit(&ctx, e("empty", "", "filled\n")).await.unwrap();
        assert_eq!(std::fs::read(&empty).unwrap(), b"filled\n");
    }

    #[tokio::test]
    async fn keeps_crlf_bytes_exactly() {
        let (dir, ctx) = setup();
        let path = prepared(dir.path(), &ctx, "w.txt", b"one\r\ntwo\r\nthree\r\n").await;
        // LF in old_string and new_string matches and writes CRLF.
        edit(&ctx, e("w.txt", "one\ntwo\n", "uno\ndos\n")).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"uno\r\ndos\r\nthree\r\n");
        // CRLF in old_string works too; a new line inside a single-line match gets CRLF.
        edit(&ctx, e("w.txt", "dos\r\n", "dos\ntwo and a half\n")).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"uno\r\ndos\r\ntwo and a half\r\nthree\r\n");
        edit(&ctx, e("w.txt", "three", "3\n4")).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"uno\r\ndos\r\ntwo and a half\r\n3\r\n4\r\n");
    }

    #[tokio::test]
    async fn lf_files_stay_lf_and_mixed_files_change_only_the_span() {
        let (dir, ctx) = setup();
        let lf = prepared(dir.path(), &ctx, "lf", b"a\nb\n").await;
        edit(&ctx, e("lf", "a\r\nb", "x\r\ny")).await.unwrap();
        assert_eq!(std::fs::read(&lf).unwrap(), b"x\ny\n");
        let mixed = prepared(dir.path(), &ctx, "mixed", b"a\r\nb\nc\r\nd\n").await;
        edit(&ctx, e("mixed", "c\nd", "C\nD")).await.unwrap();
        assert_eq!(std::fs::read(&mixed).unwrap(), b"a\r\nb\nC\r\nD\n");
    }

    #[tokio::test]
    async fn keeps_utf16_encodings_and_boms() {
        let (dir, ctx) = setup();
        for enc in [TextEncoding::Utf16Le, TextEncoding::Utf16Be] {
            let name = format!("{enc:?}.txt");
            let path = prepared(dir.path(), &ctx, &name, &encode("caf\u{e9} = 1\r\nrest\r\n", enc)).await;
            let out = edit(&ctx, e(&name, "caf\u{e9} = 1\n", "caf\u{e9} = \u{1F600}\n")).await.unwrap();
            assert!(out.contains(enc.label()) && out.contains("CRLF"), "{out}");
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(bytes, encode("caf\u{e9} = \u{1F600}\r\nrest\r\n", enc), "{enc:?}");
            let bom: &[u8] = if enc == TextEncoding::Utf16Le { &[0xFF, 0xFE] } else { &[0xFE, 0xFF] };
            assert_eq!(&bytes[..2], bom);
            assert_eq!(decode(&bytes).encoding, enc);
        }
        // Hand-built bytes, so the check does not rest on `encode` alone.
        let path = prepared(dir.path(), &ctx, "le", &[0xFF, 0xFE, b'h', 0, b'i', 0, b'\n', 0]).await;
        edit(&ctx, e("le", "hi", "yo")).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![0xFF, 0xFE, b'y', 0, b'o', 0, b'\n', 0]);
        let path = prepared(dir.path(), &ctx, "be", &[0xFE, 0xFF, 0, b'h', 0, b'i']).await;
        edit(&ctx, e("be", "hi", "yo")).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![0xFE, 0xFF, 0, b'y', 0, b'o']);
    }

    #[tokio::test]
    async fn keeps_a_utf8_bom() {
        let (dir, ctx) = setup();
        let path = prepared(dir.path(), &ctx, "bom", b"\xEF\xBB\xBFkey=old\n").await;
        edit(&ctx, e("bom", "old", "new")).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"\xEF\xBB\xBFkey=new\n");
    }

    #[tokio::test]
    async fn tolerates_curly_quotes_and_keeps_their_style() {
        let (dir, ctx) = setup();
        let text = "She said \u{201C}hello\u{201D} and didn\u{2019}t stop.\nprint(\"plain\")\n";
        let path = prepared(dir.path(), &ctx, "q.md", text.as_bytes()).await;
        let out = edit(&ctx, e("q.md", "said \"hello\" and didn't", "said \"goodbye\" and wouldn't")).await.unwrap();
        assert!(out.contains("quotes"), "{out}");
        let want = "She said \u{201C}goodbye\u{201D} and wouldn\u{2019}t stop.\nprint(\"plain\")\n";
        assert_eq!(std::fs::read_to_string(&path).unwrap(), want);
        // Curly quotes in old_string find straight ones in the file, and stay straight.
        edit(&ctx, e("q.md", "print(\u{201C}plain\u{201D})", "print(\u{201C}fancy\u{201D})")).await.unwrap();
        let want = "She said \u{201C}goodbye\u{201D} and wouldn\u{2019}t stop.\nprint(\"fancy\")\n";
        assert_eq!(std::fs::read_to_string(&path).unwrap(), want);
    }

    #[tokio::test]
    async fn replacement_text_is_literal() {
        let (dir, ctx) = setup();
        let path = prepared(dir.path(), &ctx, "r", b"price = X;\n").await;
        edit(&ctx, e("r", "X", "$1 $& $$ ${0} \\1 \\\\")).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "price = $1 $& $$ ${0} \\1 \\\\;\n");
        // Regex syntax in old_string is plain text too.
        edit(&ctx, e("r", "$1 $&", "a.*b")).await.unwrap();
        edit(&ctx, e("r", "a.*b", "ok")).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "price = ok $$ ${0} \\1 \\\\;\n");
    }

    #[tokio::test]
    async fn refuses_undecodable_and_binary_files() {
        let (dir, ctx) = setup();
        prepared(dir.path(), &ctx, "latin1", b"caf\xE9 = 1\n").await;
        let err = edit(&ctx, e("latin1", "= 1", "= 2")).await.unwrap_err();
        assert!(err.0.contains("not valid UTF-8"), "{err}");
        // A binary file written by Write carries a stamp, so the binary check is what refuses it.
        DynTool::call(&Write, json!({"file_path": "bin", "content": "a\u{0}b"}), &ctx).await.unwrap();
        let err = edit(&ctx, e("bin", "a", "b")).await.unwrap_err();
        assert!(err.0.contains("binary"), "{err}");
    }

    #[test]
    fn validates_and_declares_what_it_writes() {
        let same = e("f", "x", "x");
        assert!(DynTool::validate(&Edit, &same).unwrap_err().contains("same"));
        assert!(DynTool::validate(&Edit, &e("", "a", "b")).unwrap_err().contains("empty"));
        assert!(DynTool::validate(&Edit, &json!({"file_path": "f", "old_string": "a"})).is_err());
        let ok = e("src/lib.rs", "a", "b");
        assert!(DynTool::validate(&Edit, &ok).is_ok());
        assert_eq!(DynTool::writes(&Edit, &ok), vec![PathBuf::from("src/lib.rs")]);
        assert_eq!(DynTool::permission_subject(&Edit, &ok).as_deref(), Some("src/lib.rs"));
        assert!(!DynTool::is_read_only(&Edit, &ok) && !DynTool::is_concurrency_safe(&Edit, &ok));
    }

    #[test]
    fn view_maps_offsets_back() {
        let v = View::new("a\r\n\u{201C}b\u{201D}\r\n", true);
        assert_eq!(v.text, "a\n\"b\"\n");
        let orig = "a\r\n\u{201C}b\u{201D}\r\n";
        assert_eq!(v.to_original(0), 0);
        assert_eq!(v.to_original(1), 1);
        assert_eq!(v.to_original(2), 3);
        assert_eq!(v.to_original(3), 6);
        assert_eq!(v.to_original(4), 7);
        assert_eq!(v.to_original(5), 10);
        assert_eq!(v.to_original(6), orig.len());
    }

    #[test]
    fn overlapping_candidates_count_left_to_right() {
        let applied = apply("aaaa", "aa", "b", true).unwrap();
        assert_eq!((applied.text.as_str(), applied.count), ("bb", 2));
        assert_eq!(apply("aaa", "aa", "b", false).unwrap().text, "ba");
    }
}
