//! `Read`: shows a text file with line numbers, and remembers what was read so that
//! `Write` and `Edit` can refuse to clobber a file the agent has not seen.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

use super::text::{self, MAX_TEXT_FILE_BYTES};
use super::{FileStamp, Rich, Tool, ToolContext, ToolError};

/// The most a result shows, in bytes (about Claude Code's 25,000 tokens). With no
/// `limit` the whole file is shown up to this size, as Claude Code shows it, however
/// many lines it has and however long they are; past it the result stops at a line
/// boundary and says which `offset` to continue from (where Claude Code refuses the
/// read and asks for `offset` and `limit`). Only a single line longer than the whole
/// budget is cut.
pub const MAX_RESULT_BYTES: usize = 100_000;

/// Room kept under the result limit for the notes after the numbered lines.
const NOTE_ROOM: usize = 1000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadInput {
    /// The file to read: an absolute path, or one relative to the working directory.
    pub file_path: String,
    /// The line number to start at, counting from 1. Omit it to start at the top.
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// How many lines to show at most (all that fit in the result when omitted).
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
    /// For PDF files only: the pages to read, as one page ("3") or a range ("1-5"),
    /// counting from 1, at most 20 pages. Required for PDFs of more than 10 pages.
    pub pages: Option<String>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Read;

#[async_trait]
impl Tool for Read {
    type Input = ReadInput;
    const NAME: &'static str = "Read";

    fn description(&self) -> &'static str {
        "Show the contents of a text file, each line prefixed by its line number and a tab \
         (the number and tab are not part of the file). The whole file is shown when it fits \
         in about 100 KB of output; past that the output stops at a line and a note at the end \
         gives the `offset` to continue from. For a large file, use Grep to find the part you \
         need, then Read it with `offset` and `limit`. A file must be \
         Read before Write may overwrite it or Edit may change it, and Read again if it \
         changed since. UTF-8 and UTF-16 (with a byte order mark) are decoded. Images \
         (PNG, JPEG, GIF, WebP, up to about 3.7 MB) are shown to you as images, and PDFs \
         as documents: a PDF of more than 10 pages must be read with `pages` (\"1-5\", \"3\"), \
         at most 20 pages per call; other binary files are refused, and so are directories (use LS for those). Reading several files at \
         once is fine."
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
        if input.file_path.trim().is_empty() {
            return Err("file_path is empty; give the path of the file to read".into());
        }
        if input.offset == Some(0) {
            return Err("offset counts from 1; use 1 (or leave it out) to start at the first line".into());
        }
        if input.limit == Some(0) {
            return Err("limit is 0, which would show nothing; give a positive number of lines or leave it out".into());
        }
        if let Some(pages) = &input.pages {
            super::pdf::PageRange::parse(pages)?;
        }
        Ok(())
    }

    fn permission_subject(&self, input: &Self::Input) -> Option<String> {
        Some(input.file_path.clone())
    }

    fn max_result_bytes(&self) -> usize {
        MAX_RESULT_BYTES
    }

    /// Images (PNG, JPEG, GIF, WebP) and PDFs go to the model as blocks; see
    /// [`super::media`].
    async fn call_with_attachments(&self, input: Self::Input, ctx: &ToolContext) -> Result<Rich, ToolError> {
        let path = ctx.session.resolve(&input.file_path);
        let pages = match &input.pages {
            Some(pages) => Some(super::pdf::PageRange::parse(pages).map_err(ToolError)?),
            None => None,
        };
        let found = look(&path, Some(pages.is_some())).await;
        if let Looked::File { media: Some(media_type), metadata, bytes } = found {
            return super::media::attach(&path, media_type, &metadata, bytes, pages, ctx).await;
        }
        if pages.is_some() && matches!(found, Looked::File { .. }) {
            return Err(ToolError(format!(
                "{} is not a PDF; `pages` applies to PDF files only. Use `offset` and `limit` to read part of a \
                 text file.",
                path.display()
            )));
        }
        self.text(&input, &path, found, ctx).await.map(Rich::text)
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = ctx.session.resolve(&input.file_path);
        let found = look(&path, None).await;
        self.text(&input, &path, found, ctx).await
    }
}

/// What one look at a path found: a `stat`, then for a regular file one open, one
/// `fstat` and its reads, all in one step ([`look`]) rather than a blocking-pool round
/// trip for each.
enum Looked {
    /// `stat` failed.
    Failed(std::io::Error),
    /// Something other than a regular file (a directory, a device, a socket, a pipe).
    NotFile(std::fs::Metadata),
    /// A regular file; `bytes` is `None` when it is larger than its kind's limit
    /// ([`limit`]), and then it was not read past its first bytes.
    File { metadata: std::fs::Metadata, media: Option<&'static str>, bytes: Option<Vec<u8>> },
}

/// The most `Read` loads of a file of kind `media` (`None`: text). `attach` is
/// `Some(pages given)` when images and PDFs are sent as blocks, `None` when every file
/// is read as text.
fn limit(media: Option<&str>, attach: Option<bool>) -> u64 {
    match (media, attach) {
        (Some(media_type), Some(pages)) => super::media::limit(media_type, pages),
        _ => MAX_TEXT_FILE_BYTES,
    }
}

/// Files up to this size are read in place, on the runtime's thread: a few
/// microseconds of `read` against a round trip to the blocking pool. Larger ones go to
/// the pool, so that a long read does not hold up the other calls of the tool host.
const READ_IN_PLACE_BYTES: u64 = 256 * 1024;

async fn look(path: &std::path::Path, attach: Option<bool>) -> Looked {
    let metadata = match std::fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(m) => return Looked::NotFile(m),
        Err(e) => return Looked::Failed(e),
    };
    if metadata.len() <= READ_IN_PLACE_BYTES {
        return open_and_read(path, metadata, attach);
    }
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || open_and_read(&path, metadata, attach))
        .await
        .unwrap_or_else(|e| Looked::Failed(std::io::Error::other(format!("the file read stopped: {e}"))))
}

/// The rest of [`look`] once `stat` found a regular file.
fn open_and_read(path: &std::path::Path, metadata: std::fs::Metadata, attach: Option<bool>) -> Looked {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking: were the file swapped for a pipe after the `stat`, the open does not
    // wait for a writer; the `fstat` below then sees what was opened.
    let mut file = match std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK).open(path) {
        Ok(f) => f,
        Err(e) => return Looked::Failed(e),
    };
    let metadata = match file.metadata() {
        Ok(m) if m.is_file() => m,
        Ok(m) => return Looked::NotFile(m),
        Err(_) => metadata,
    };
    let mut bytes = Vec::new();
    if let Err(e) = (&mut file).take(16).read_to_end(&mut bytes) {
        return Looked::Failed(e);
    }
    let media = super::media::sniff(&bytes);
    if metadata.len() > limit(media, attach) {
        return Looked::File { metadata, media, bytes: None };
    }
    let capacity = usize::try_from(metadata.len()).unwrap_or(0).saturating_add(1);
    bytes.reserve(capacity.saturating_sub(bytes.len()));
    match file.read_to_end(&mut bytes) {
        Ok(_) => Looked::File { metadata, media, bytes: Some(bytes) },
        Err(e) => Looked::Failed(e),
    }
}

impl Read {
    /// The text path: numbered lines of what [`look`] found.
    async fn text(
        &self,
        input: &ReadInput,
        path: &std::path::Path,
        found: Looked,
        ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        let shown_path = path.display();
        let (metadata, bytes) = match found {
            Looked::Failed(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ToolError(text::missing_file_message(&input.file_path, path).await));
            }
            Looked::Failed(e) => return Err(ToolError(text::io_error_message("read", path, &e))),
            Looked::NotFile(m) if m.is_dir() => {
                return Err(ToolError(format!(
                    "{shown_path} is a directory, not a file. Use LS to list it, or Glob to find files in it."
                )));
            }
            Looked::NotFile(_) => {
                return Err(ToolError(format!(
                    "{shown_path} is not a regular file (a device, socket or pipe); Read only shows regular files."
                )));
            }
            Looked::File { metadata, bytes: None, .. } => {
                return Err(ToolError(format!(
                    "{shown_path} is {} bytes, more than Read loads ({MAX_TEXT_FILE_BYTES} bytes). Use Grep to find \
                     the lines you need, or Bash with head, tail or sed -n to show a part.",
                    metadata.len()
                )));
            }
            Looked::File { metadata, bytes: Some(bytes), .. } => (metadata, bytes),
        };
        if text::is_binary(&bytes) {
            return Err(ToolError(format!(
                "{shown_path} looks like a binary file (it has NUL bytes), and Read only shows text. \
                 If you need to inspect it, use Bash (for example `file` or `xxd | head`)."
            )));
        }
        let decoded = text::decode(&bytes);
        ctx.session.record_read(path, FileStamp::of(&bytes, &metadata));

        let lines = text::split_lines(&decoded.text);
        let total = lines.len() as u64;
        if total == 0 {
            return Ok(format!("{shown_path} is empty (0 lines)."));
        }
        let start = input.offset.unwrap_or(1).max(1);
        if start > total {
            return Ok(format!(
                "{shown_path} has only {total} line{}; offset {start} is past the end of the file, so nothing \
                 is shown. Use an offset from 1 to {total}.",
                plural(total)
            ));
        }
        let limit = input.limit.unwrap_or(u64::MAX).max(1);
        let end = total.min(start.saturating_add(limit - 1));
        let budget = self.max_result_bytes().saturating_sub(NOTE_ROOM);

        let mut out = String::new();
        let mut last_shown = start - 1;
        let mut stopped_for_size = false;
        for (n, line) in (start..=end).zip(&lines[(start - 1) as usize..end as usize]) {
            let entry = format!("{n}\t{}\n", cut_line(line, budget));
            if n > start && out.len() + entry.len() > budget {
                stopped_for_size = true;
                break;
            }
            out.push_str(&entry);
            last_shown = n;
        }

        let mut notes = Vec::new();
        if last_shown < total {
            let why = if stopped_for_size {
                format!(", stopped early to keep the output under {budget} bytes")
            } else {
                String::new()
            };
            notes.push(format!(
                "(Showing lines {start}-{last_shown} of {total}{why}. To continue, Read with offset={}.)",
                last_shown + 1
            ));
        } else if start > 1 {
            notes.push(format!("(Showing lines {start}-{last_shown} of {total}; that is the end of the file.)"));
        }
        if decoded.lossy {
            notes.push(
                "(The file is not valid UTF-8: bytes that could not be decoded are shown as \u{FFFD}. \
                 Edit refuses such a file; Write can replace it whole.)"
                    .to_owned(),
            );
        }
        if !notes.is_empty() {
            out.push('\n');
            out.push_str(&notes.join("\n"));
            out.push('\n');
        }
        Ok(out)
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// `line`, whole when it fits in `budget` bytes with room for its number, else cut
/// there (at a character boundary) with a marker saying so.
fn cut_line(line: &str, budget: usize) -> std::borrow::Cow<'_, str> {
    let room = budget.saturating_sub(200);
    if line.len() <= room {
        return line.into();
    }
    let at = (0..=room).rev().find(|i| line.is_char_boundary(*i)).unwrap_or(0);
    let shown = line[..at].chars().count();
    let chars = shown + line[at..].chars().count();
    format!("{}… [line cut: showing {shown} of {chars} characters; use Bash (cut -c or fold) for the rest]", &line[..at]).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::text::{TextEncoding, encode};
    use crate::tools::{DynTool, Session};
    use serde_json::json;
    use std::path::Path;
    use std::sync::Arc;

    fn setup() -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ToolContext { session: Arc::new(Session::new(dir.path())), cancel: Default::default() };
        (dir, ctx)
    }

    async fn read(ctx: &ToolContext, input: serde_json::Value) -> Result<String, ToolError> {
        DynTool::call(&Read, input, ctx).await
    }

    fn numbered(range: std::ops::RangeInclusive<u64>) -> String {
        range.map(|n| format!("{n}\tline {n}\n")).collect()
    }

    fn write_lines(dir: &Path, name: &str, n: u64) {
        let body: String = (1..=n).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.join(name), body).unwrap();
    }

    #[tokio::test]
    async fn shows_numbered_lines_and_records_the_whole_file() {
        let (dir, ctx) = setup();
        write_lines(dir.path(), "a.txt", 3);
        let out = read(&ctx, json!({"file_path": "a.txt"})).await.unwrap();
        assert_eq!(out, "1\tline 1\n2\tline 2\n3\tline 3\n");
        // A range still stamps the whole file.
        let path = dir.path().join("a.txt");
        let _ = read(&ctx, json!({"file_path": path.to_str().unwrap(), "offset": 2, "limit": 1})).await.unwrap();
        let stamp = ctx.session.last_read(&path).unwrap();
        assert!(stamp.matches(&std::fs::read(&path).unwrap()));
    }

    #[tokio::test]
    async fn offset_and_limit_select_lines_and_say_how_to_continue() {
        let (dir, ctx) = setup();
        write_lines(dir.path(), "ten.txt", 10);
        let out = read(&ctx, json!({"file_path": "ten.txt", "offset": 3, "limit": 2})).await.unwrap();
        assert!(out.starts_with(&numbered(3..=4)), "{out}");
        assert!(!out.contains("line 5"), "{out}");
        assert!(out.contains("Showing lines 3-4 of 10") && out.contains("offset=5"), "{out}");
        let tail = read(&ctx, json!({"file_path": "ten.txt", "offset": 9})).await.unwrap();
        assert!(tail.starts_with(&numbered(9..=10)), "{tail}");
        assert!(tail.contains("end of the file"), "{tail}");
        let past = read(&ctx, json!({"file_path": "ten.txt", "offset": 11})).await.unwrap();
        assert!(past.contains("past the end") && past.contains("10 lines") && past.contains("1 to 10"), "{past}");
    }

    #[tokio::test]
    async fn a_3000_line_file_and_a_5000_character_line_are_shown_whole() {
        let (dir, ctx) = setup();
        let body: String = (1..=3000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.path().join("long.txt"), body).unwrap();
        let out = read(&ctx, json!({"file_path": "long.txt"})).await.unwrap();
        assert_eq!(out, numbered(1..=3000));
        let wide = "x".repeat(5000);
        std::fs::write(dir.path().join("wide.txt"), format!("{wide}\nshort\n")).unwrap();
        let out = read(&ctx, json!({"file_path": "wide.txt"})).await.unwrap();
        assert_eq!(out, format!("1\t{wide}\n2\tshort\n"));
    }

    #[tokio::test]
    async fn output_stays_under_the_result_limit() {
        let (dir, ctx) = setup();
        let body: String = (1..=2000).map(|i| format!("{i:0>100}\n")).collect();
        std::fs::write(dir.path().join("wide.txt"), body).unwrap();
        let out = read(&ctx, json!({"file_path": "wide.txt"})).await.unwrap();
        assert!(out.len() <= DynTool::max_result_bytes(&Read), "{}", out.len());
        assert!(out.contains("stopped early") && out.contains("To continue, Read with offset="), "{out}");
    }

    #[tokio::test]
    async fn empty_file_says_so() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("empty"), "").unwrap();
        let out = read(&ctx, json!({"file_path": "empty"})).await.unwrap();
        assert!(out.contains("is empty"), "{out}");
        // Recorded, so Write may overwrite it.
        assert!(ctx.session.last_read(&dir.path().join("empty")).is_some());
    }

    #[tokio::test]
    async fn cuts_only_a_line_longer_than_the_whole_result() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("l"), format!("{}\nshort\n", "é".repeat(MAX_RESULT_BYTES))).unwrap();
        let out = read(&ctx, json!({"file_path": "l"})).await.unwrap();
        assert!(out.len() <= MAX_RESULT_BYTES, "{}", out.len());
        let first = out.lines().next().unwrap();
        let end: String = first.chars().skip(first.chars().count() - 150).collect();
        assert!(first.starts_with("1\té") && end.contains("line cut"), "{end}");
        assert!(end.contains(&format!("of {MAX_RESULT_BYTES} characters")), "{end}");
        assert!(out.ends_with("for the rest]\n2\tshort\n"), "{end}");
    }

    #[tokio::test]
    async fn refuses_binary_files_and_directories() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("bin"), b"\x7fELF\x02\x01\x00\x00rest").unwrap();
        let err = read(&ctx, json!({"file_path": "bin"})).await.unwrap_err();
        assert!(err.0.contains("binary"), "{err}");
        assert!(ctx.session.last_read(&dir.path().join("bin")).is_none());
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let err = read(&ctx, json!({"file_path": "sub"})).await.unwrap_err();
        assert!(err.0.contains("directory") && err.0.contains("LS"), "{err}");
    }

    #[tokio::test]
    async fn a_file_past_the_in_place_size_is_read_on_the_pool_the_same_way() {
        let (dir, ctx) = setup();
        let body: String = (1..=40_000).map(|n| format!("line {n}\n")).collect();
        assert!(body.len() as u64 > READ_IN_PLACE_BYTES);
        std::fs::write(dir.path().join("big.txt"), &body).unwrap();
        let out = read(&ctx, json!({"file_path": "big.txt", "offset": 39_999})).await.unwrap();
        assert!(out.starts_with("39999\tline 39999\n40000\tline 40000\n\n(Showing lines 39999-40000 of 40000;"), "{out}");
        assert!(ctx.session.last_read(&dir.path().join("big.txt")).unwrap().matches(body.as_bytes()));
    }

    #[tokio::test]
    async fn a_pipe_is_refused_without_waiting_for_a_writer() {
        let (dir, ctx) = setup();
        nix::unistd::mkfifo(&dir.path().join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Opened for reading, a pipe with no writer would block the call forever.
        let call = read(&ctx, json!({"file_path": "fifo"}));
        let err = tokio::time::timeout(std::time::Duration::from_secs(10), call).await.unwrap().unwrap_err();
        assert!(err.0.contains("not a regular file"), "{err}");
        // Nor does the open that follows a `stat`, were the file swapped for a pipe.
        let stale = std::fs::metadata(dir.path().join("fifo")).unwrap();
        let found = open_and_read(&dir.path().join("fifo"), stale, None);
        assert!(matches!(found, Looked::NotFile(_)));
    }

    #[tokio::test]
    async fn missing_file_names_the_path_and_suggests_a_neighbour() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("notes.txt"), "hi\n").unwrap();
        let err = read(&ctx, json!({"file_path": "note.txt"})).await.unwrap_err();
        assert!(err.0.contains(&dir.path().join("note.txt").display().to_string()), "{err}");
        assert!(err.0.contains("Did you mean") && err.0.contains("notes.txt"), "{err}");
        let err = read(&ctx, json!({"file_path": "nowhere/x.rs"})).await.unwrap_err();
        assert!(err.0.contains("does not exist either"), "{err}");
        std::fs::write(dir.path().join("a.txt"), "hi\n").unwrap();
        let err = read(&ctx, json!({"file_path": "b.txt"})).await.unwrap_err();
        assert!(!err.0.contains("Did you mean"), "{err}");
        let err = read(&ctx, json!({"file_path": "zzzzzzzz.md"})).await.unwrap_err();
        assert!(err.0.contains("does not exist") && !err.0.contains("Did you mean"), "{err}");
    }

    #[tokio::test]
    async fn decodes_utf16_and_strips_bom_and_carriage_returns() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("le"), encode("h\u{e9}llo\r\nworld\r\n", TextEncoding::Utf16Le)).unwrap();
        std::fs::write(dir.path().join("be"), encode("h\u{e9}llo\nworld\n", TextEncoding::Utf16Be)).unwrap();
        std::fs::write(dir.path().join("bom"), b"\xEF\xBB\xBFh\xC3\xA9llo\nworld\n").unwrap();
        for name in ["le", "be", "bom"] {
            let out = read(&ctx, json!({"file_path": name})).await.unwrap();
            assert_eq!(out, "1\th\u{e9}llo\n2\tworld\n", "{name}");
        }
    }

    #[tokio::test]
    async fn invalid_utf8_is_shown_lossily_with_a_note() {
        let (dir, ctx) = setup();
        std::fs::write(dir.path().join("latin1"), b"caf\xE9\n").unwrap();
        let out = read(&ctx, json!({"file_path": "latin1"})).await.unwrap();
        assert!(out.starts_with("1\tcaf\u{FFFD}\n") && out.contains("not valid UTF-8"), "{out}");
    }

    #[test]
    fn validates_input_and_declares_itself_read_only() {
        assert!(DynTool::validate(&Read, &json!({"file_path": ""})).unwrap_err().contains("empty"));
        assert!(DynTool::validate(&Read, &json!({"file_path": "a", "offset": 0})).unwrap_err().contains("offset"));
        assert!(DynTool::validate(&Read, &json!({"file_path": "a", "limit": 0})).unwrap_err().contains("limit"));
        assert!(DynTool::validate(&Read, &json!({"file_path": "a", "bogus": 1})).is_err());
        let ok = json!({"file_path": "src/a.rs", "offset": 1, "limit": 5});
        assert!(DynTool::validate(&Read, &ok).is_ok());
        assert!(DynTool::is_read_only(&Read, &ok));
        assert!(DynTool::is_concurrency_safe(&Read, &ok));
        assert!(!DynTool::is_destructive(&Read, &ok));
        assert_eq!(DynTool::permission_subject(&Read, &ok).as_deref(), Some("src/a.rs"));
        assert!(DynTool::writes(&Read, &ok).is_empty());
        let schema = DynTool::input_schema(&Read);
        assert_eq!(schema["required"], json!(["file_path"]));
        assert_eq!(schema["properties"]["offset"]["minimum"], json!(1));
    }
}
