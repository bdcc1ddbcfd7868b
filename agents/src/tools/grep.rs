//! `Grep`: regular-expression search over file contents, built on ripgrep's crates.
//!
//! The tree is walked in parallel (`ignore`'s parallel walker, one `Searcher` per
//! thread), each file's output is rendered into its own buffer by a [`Sink`], and the
//! buffers are sorted by path at the end so the result does not depend on scheduling:
//! `files_with_matches` and `count` list files in path order, `content` groups lines
//! per file in path order.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch};
use ignore::WalkState;
use ignore::overrides::{Override, OverrideBuilder};
use ignore::types::{Types, TypesBuilder};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::glob::{cancelled, display, existing_path, subject, walker};
use super::{Tool, ToolContext, ToolError};
use crate::permissions::paths::{PathFilter, hidden_paths, normalize};

/// Lines longer than this many characters are cut.
const MAX_LINE_CHARS: usize = 500;
/// The search stops once this much output has been gathered (a guard on memory; the
/// pipeline stores large results in a file anyway).
const MAX_OUTPUT_BYTES: usize = 16 << 20;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepInput {
    /// The regular expression to look for (Rust regex syntax, as in ripgrep). Escape
    /// literal regex characters: `fn main\(`, `\{\}`, `a\.b`.
    pub pattern: String,
    /// A file or directory to search, absolute or relative to the working directory.
    /// Leave it out to search the working directory.
    #[serde(default)]
    pub path: Option<String>,
    /// Only search files whose path matches this glob, e.g. `*.rs`, `*.{ts,tsx}` or
    /// `src/**/*.py`; start it with `!` to leave matching files out (`!*_test.go`).
    /// Several globs may be given separated by spaces. A glob without `/` matches the
    /// file name at any depth.
    #[serde(default)]
    pub glob: Option<String>,
    /// Only search files of this ripgrep file type, e.g. `rust`, `py`, `js`, `ts`, `go`,
    /// `java`, `c`, `cpp`, `md`, `yaml`, `toml`. Covers every file extension of the
    /// language, so it is safer than a hand-written glob.
    #[serde(default, rename = "type")]
    pub file_type: Option<String>,
    /// What to return: `files_with_matches` (the default) lists matching files,
    /// `count` gives `path:N` matching lines per file, `content` gives the matching
    /// lines themselves.
    #[serde(default)]
    pub output_mode: Option<OutputMode>,
    /// Ignore case when matching.
    #[serde(default, rename = "-i")]
    pub case_insensitive: Option<bool>,
    /// Show line numbers in `content` mode (default true).
    #[serde(default, rename = "-n")]
    pub line_numbers: Option<bool>,
    /// Lines of context to show after each match (`content` mode only).
    #[serde(default, rename = "-A")]
    pub after_context: Option<u32>,
    /// Lines of context to show before each match (`content` mode only).
    #[serde(default, rename = "-B")]
    pub before_context: Option<u32>,
    /// Lines of context to show before and after each match (`content` mode only);
    /// `-A` and `-B` take precedence.
    #[serde(default, rename = "-C")]
    pub context: Option<u32>,
    /// The same as `-C`, under its long name; `-C` wins when both are given.
    #[serde(default, rename = "context")]
    pub context_long: Option<u32>,
    /// Show only the matching part of each matching line, one match per output line
    /// (`content` mode only).
    #[serde(default, rename = "-o")]
    pub only_matching: Option<bool>,
    /// Keep only the first N lines of the output (N entries in `files_with_matches` and
    /// `count` mode), after skipping `offset`. 0 or absent means no limit.
    #[serde(default)]
    pub head_limit: Option<usize>,
    /// Skip the first N lines of the output (N entries in `files_with_matches` and
    /// `count` mode) before `head_limit` applies, to page through a long result.
    #[serde(default)]
    pub offset: Option<usize>,
    /// Let the pattern span lines: `.` also matches a newline and `\n` may appear in
    /// the pattern. Slower; use only when a match must cross lines.
    #[serde(default)]
    pub multiline: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(inline)]
pub enum OutputMode {
    // Plain variants without doc comments, so the schema is a simple string enum; the
    // field's doc says what each one does.
    Content,
    FilesWithMatches,
    Count,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Grep;

#[async_trait]
impl Tool for Grep {
    type Input = GrepInput;
    const NAME: &'static str = "Grep";

    fn description(&self) -> &'static str {
        "Search file contents with a regular expression (ripgrep's Rust regex syntax). \
         Searches `path` (a file or a directory, default the working directory) \
         recursively, skipping files excluded by .gitignore or .ignore, hidden files, \
         binary files and `.git`; symbolic links are not followed. Narrow the search with \
         `glob` (`*.rs`, `*.{ts,tsx}`, `!*_test.go`) or `type` (`rust`, `py`, `js`). \
         output_mode `files_with_matches` (default) lists matching files sorted by path; \
         `count` gives `path:N` matching lines per file; `content` gives `path:line:text` \
         for matches, `path-line-text` for context lines (-A, -B, -C) and `--` between \
         separate groups (`context` is another name for -C); `-o` shows only the matching \
         part of each line. `-i` ignores case; `multiline: true` lets a match span lines. \
         `head_limit` keeps the first N output lines, after skipping `offset` lines, so \
         `offset` and `head_limit` page through a long result. Lines longer than 500 characters \
         are cut. Use this instead of running grep or rg through Bash."
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
        Plan::new(input).map(|_| ())
    }

    fn permission_subject(&self, input: &Self::Input) -> Option<String> {
        Some(subject(input.path.as_deref()))
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        let plan = Plan::new(&input).map_err(ToolError)?;
        let (root, _) = existing_path(ctx, input.path.as_deref())?;
        let overrides = plan.overrides(&root).map_err(ToolError)?;
        let cwd = normalize(ctx.session.cwd());
        let cancel = ctx.cancel.clone();
        let hidden = hidden_paths();
        tokio::task::spawn_blocking(move || plan.run(&root, &cwd, overrides, &hidden, &cancel))
            .await
            .map_err(|e| ToolError(format!("Grep failed: {e}")))?
    }
}

/// A checked search, ready to run.
struct Plan {
    matcher: RegexMatcher,
    searcher: SearcherBuilder,
    mode: OutputMode,
    context: bool,
    types: Option<Types>,
    globs: Vec<String>,
    head_limit: Option<usize>,
    offset: usize,
    only_matching: bool,
}

impl Plan {
    fn new(input: &GrepInput) -> Result<Self, String> {
        let mode = input.output_mode.unwrap_or(OutputMode::FilesWithMatches);
        let multiline = input.multiline.unwrap_or(false);
        let matcher = build_matcher(&input.pattern, input.case_insensitive.unwrap_or(false), multiline)?;

        let content = mode == OutputMode::Content;
        let around = input.context.or(input.context_long);
        let before = if content { input.before_context.or(around).unwrap_or(0) as usize } else { 0 };
        let after = if content { input.after_context.or(around).unwrap_or(0) as usize } else { 0 };
        let mut searcher = SearcherBuilder::new();
        searcher
            .binary_detection(BinaryDetection::quit(b'\x00'))
            .line_number(content && input.line_numbers.unwrap_or(true))
            .multi_line(multiline)
            .before_context(before)
            .after_context(after);

        let types = match input.file_type.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            None => None,
            Some(name) => {
                let mut builder = TypesBuilder::new();
                builder.add_defaults();
                builder.select(name);
                Some(builder.build().map_err(|e| {
                    format!("{e}; use a ripgrep type name such as rust, py, js, ts, go, java, c, cpp, md, json, yaml, toml or sh, or use glob instead")
                })?)
            }
        };
        let globs: Vec<String> = input.glob.as_deref().unwrap_or("").split_whitespace().map(str::to_string).collect();
        for g in &globs {
            let bare = g.strip_prefix('!').unwrap_or(g);
            globset::Glob::new(bare).map_err(|e| format!("invalid glob {g:?}: {}", e.kind()))?;
        }
        let head_limit = input.head_limit.filter(|&n| n > 0);
        let offset = input.offset.unwrap_or(0);
        let only_matching = content && input.only_matching.unwrap_or(false);
        Ok(Self {
            matcher,
            searcher,
            mode,
            context: before > 0 || after > 0,
            types,
            globs,
            head_limit,
            offset,
            only_matching,
        })
    }

    fn overrides(&self, root: &Path) -> Result<Option<Override>, String> {
        if self.globs.is_empty() {
            return Ok(None);
        }
        let mut builder = OverrideBuilder::new(root);
        for g in &self.globs {
            builder.add(g).map_err(|e| format!("invalid glob {g:?}: {e}"))?;
        }
        builder.build().map(Some).map_err(|e| format!("invalid glob: {e}"))
    }

    fn run(
        self,
        root: &Path,
        cwd: &Path,
        overrides: Option<Override>,
        hidden: &Arc<PathFilter>,
        cancel: &CancellationToken,
    ) -> Result<String, ToolError> {
        let mut walk = walker(root, hidden);
        if let Some(types) = self.types.clone() {
            walk.types(types);
        }
        if let Some(overrides) = overrides {
            walk.overrides(overrides);
        }

        let found: Mutex<Vec<FileResult>> = Mutex::new(Vec::new());
        let total_bytes = AtomicUsize::new(0);
        let overflow = AtomicBool::new(false);
        let unreadable = AtomicUsize::new(0);
        walk.build_parallel().run(|| {
            let mut searcher = self.searcher.build();
            let matcher = self.matcher.clone();
            let (found, total_bytes, overflow, unreadable) = (&found, &total_bytes, &overflow, &unreadable);
            let mode = self.mode;
            let only_matching = self.only_matching;
            Box::new(move |entry| {
                if cancel.is_cancelled() || overflow.load(Ordering::Relaxed) {
                    return WalkState::Quit;
                }
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(_) => {
                        unreadable.fetch_add(1, Ordering::Relaxed);
                        return WalkState::Continue;
                    }
                };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    return WalkState::Continue;
                }
                let mut sink = FileSink::new(mode, entry.path(), cwd, cancel);
                if only_matching {
                    sink.only = Some(&matcher);
                }
                if searcher.search_path(&matcher, entry.path(), &mut sink).is_err() {
                    unreadable.fetch_add(1, Ordering::Relaxed);
                    return WalkState::Continue;
                }
                if sink.binary || !sink.matched {
                    return WalkState::Continue;
                }
                if sink.overflow
                    || total_bytes.fetch_add(sink.out.len() + sink.display.len(), Ordering::Relaxed) > MAX_OUTPUT_BYTES
                {
                    overflow.store(true, Ordering::Relaxed);
                }
                let FileSink { display, out, count, .. } = sink;
                let result = FileResult { path: entry.into_path(), display, out, count };
                found.lock().unwrap_or_else(|e| e.into_inner()).push(result);
                WalkState::Continue
            })
        });
        if cancel.is_cancelled() {
            return Err(cancelled());
        }

        let mut found = found.into_inner().unwrap_or_else(|e| e.into_inner());
        if found.is_empty() {
            return Ok("No matches found".into());
        }
        found.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        let mut out = String::with_capacity(found.iter().map(|f| f.out.len() + f.display.len() + 24).sum());
        for (i, file) in found.iter().enumerate() {
            match self.mode {
                OutputMode::FilesWithMatches => {
                    out.push_str(&file.display);
                    out.push('\n');
                }
                OutputMode::Count => {
                    let _ = writeln!(out, "{}:{}", file.display, file.count);
                }
                OutputMode::Content => {
                    if self.context && i > 0 {
                        out.push_str("--\n");
                    }
                    out.push_str(&file.out);
                }
            }
        }
        let mut notes = Vec::new();
        let total = out.bytes().filter(|&b| b == b'\n').count();
        let skip = self.offset.min(total);
        let take = self.head_limit.unwrap_or(usize::MAX).min(total - skip);
        if skip > 0 || take < total - skip {
            let (from, to) = (after_line(&out, skip), after_line(&out, skip + take));
            out = out[from..to].to_string();
            let last = skip + take;
            let more = if last < total { format!("; offset={last} continues") } else { String::new() };
            notes.push(match (skip, take) {
                (_, 0) => format!("(offset {} is past the end: the result has {total} lines)", self.offset),
                (0, _) => format!("(head_limit: showing {take} of {total} lines{more})"),
                _ => format!("(showing lines {}-{last} of {total}{more})", skip + 1),
            });
        }
        if overflow.load(Ordering::Relaxed) {
            notes.push(format!(
                "(search stopped early: output passed {} MiB; narrow it with path, glob or type)",
                MAX_OUTPUT_BYTES >> 20
            ));
        }
        let unreadable = unreadable.load(Ordering::Relaxed);
        if unreadable > 0 {
            notes.push(format!("({unreadable} paths could not be read and were skipped)"));
        }
        for note in notes {
            out.push_str(&note);
            out.push('\n');
        }
        Ok(out)
    }
}

/// The byte offset just past the `n`th line of `text` (0 for none, the end past the last).
fn after_line(text: &str, n: usize) -> usize {
    match n.checked_sub(1) {
        None => 0,
        Some(i) => text.match_indices('\n').nth(i).map_or(text.len(), |(at, _)| at + 1),
    }
}

fn build_matcher(pattern: &str, case_insensitive: bool, multiline: bool) -> Result<RegexMatcher, String> {
    let mut builder = RegexMatcherBuilder::new();
    // `^` and `$` match at line boundaries, as in ripgrep.
    builder.case_insensitive(case_insensitive).multi_line(true);
    if multiline {
        builder.dot_matches_new_line(true);
    } else {
        // Lets the searcher run the regex over whole buffers and only find line bounds
        // around a match; also rejects patterns that could only match across lines.
        builder.line_terminator(Some(b'\n'));
    }
    builder.build(pattern).map_err(|e| {
        let hint = if !multiline && (pattern.contains("\\n") || pattern.contains('\n')) {
            "; set multiline: true to match across lines"
        } else {
            ""
        };
        format!("invalid regex {pattern:?}: {e}{hint}")
    })
}

/// One file's rendered output.
struct FileResult {
    path: PathBuf,
    display: String,
    out: String,
    count: u64,
}

/// Renders one file's matches into a string buffer, as ripgrep would print them.
struct FileSink<'a> {
    mode: OutputMode,
    path: &'a Path,
    cwd: &'a Path,
    cancel: &'a CancellationToken,
    /// The path as shown, made on the first match.
    display: String,
    out: String,
    count: u64,
    matched: bool,
    binary: bool,
    overflow: bool,
    /// With `-o`: the matcher whose matches are shown instead of whole lines.
    only: Option<&'a RegexMatcher>,
}

impl<'a> FileSink<'a> {
    fn new(mode: OutputMode, path: &'a Path, cwd: &'a Path, cancel: &'a CancellationToken) -> Self {
        Self {
            mode,
            path,
            cwd,
            cancel,
            display: String::new(),
            out: String::new(),
            count: 0,
            matched: false,
            binary: false,
            overflow: false,
            only: None,
        }
    }

    fn line(&mut self, sep: char, number: Option<u64>, bytes: &[u8]) {
        self.out.push_str(&self.display);
        self.out.push(sep);
        if let Some(n) = number {
            let _ = write!(self.out, "{n}");
            self.out.push(sep);
        }
        push_text(&mut self.out, bytes);
        self.out.push('\n');
    }

    /// Whether the search should go on.
    fn go_on(&mut self) -> bool {
        if self.out.len() > MAX_OUTPUT_BYTES {
            self.overflow = true;
        }
        !self.overflow && !self.cancel.is_cancelled()
    }
}

impl Sink for FileSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, searcher: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        if !self.matched {
            self.matched = true;
            self.display = display(self.cwd, self.path);
        }
        match self.mode {
            OutputMode::FilesWithMatches => return Ok(false),
            OutputMode::Count => {
                self.count += if searcher.multi_line() { mat.lines().count() as u64 } else { 1 };
            }
            OutputMode::Content => {
                let first = mat.line_number();
                if let Some(matcher) = self.only {
                    // Each match on its own line, numbered by the line it starts on.
                    let bytes = mat.bytes();
                    let mut parts = Vec::new();
                    let _ = grep_matcher::Matcher::find_iter(matcher, bytes, |m| {
                        if !m.is_empty() {
                            parts.push((m.start(), m.end()));
                        }
                        true
                    });
                    for (start, end) in parts {
                        let line = bytes[..start].iter().filter(|&&b| b == b'\n').count() as u64;
                        self.line(':', first.map(|n| n + line), &bytes[start..end]);
                    }
                } else {
                    for (i, line) in mat.lines().enumerate() {
                        self.line(':', first.map(|n| n + i as u64), line);
                    }
                }
            }
        }
        Ok(self.go_on())
    }

    fn context(&mut self, _searcher: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        if matches!(ctx.kind(), SinkContextKind::Before | SinkContextKind::After) {
            if self.display.is_empty() {
                self.display = display(self.cwd, self.path);
            }
            self.line('-', ctx.line_number(), ctx.bytes());
        }
        Ok(self.go_on())
    }

    fn context_break(&mut self, _searcher: &Searcher) -> Result<bool, Self::Error> {
        self.out.push_str("--\n");
        Ok(true)
    }

    fn binary_data(&mut self, _searcher: &Searcher, _offset: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}

/// Appends one line without its terminator, cut at [`MAX_LINE_CHARS`] characters.
fn push_text(out: &mut String, bytes: &[u8]) {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if bytes.len() <= MAX_LINE_CHARS {
        match std::str::from_utf8(bytes) {
            Ok(text) => out.push_str(text),
            Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
        }
        return;
    }
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => {
            out.push_str(&text[..cut]);
            let _ = write!(out, " [… {} more characters]", text[cut..].chars().count());
        }
        None => out.push_str(&text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::DynTool;
    use crate::tools::glob::test_support::{ctx, write};
    use serde_json::{Value, json};

    async fn grep(root: &Path, input: Value) -> Result<String, ToolError> {
        DynTool::call(&Grep, input, &ctx(root)).await
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "src/main.rs", "fn main() {\n    helper();\n}\n\nfn helper() {}\n");
        write(root, "src/lib.rs", "pub fn Lib() {}\n// no match here\n");
        write(root, "app.py", "def main():\n    pass\n");
        write(root, "notes.txt", "FN upper\n");
        dir
    }

    #[tokio::test]
    async fn files_with_matches_is_the_default_sorted_by_path() {
        let dir = tree();
        let out = grep(dir.path(), json!({"pattern": "fn "})).await.unwrap();
        assert_eq!(out, "src/lib.rs\nsrc/main.rs\n");
        let out = grep(dir.path(), json!({"pattern": "nothing-like-this"})).await.unwrap();
        assert_eq!(out, "No matches found");
    }

    #[tokio::test]
    async fn count_and_content_modes() {
        let dir = tree();
        let out = grep(dir.path(), json!({"pattern": "fn ", "output_mode": "count"})).await.unwrap();
        assert_eq!(out, "src/lib.rs:1\nsrc/main.rs:2\n");
        let out = grep(dir.path(), json!({"pattern": "fn ", "output_mode": "content"})).await.unwrap();
        assert_eq!(out, "src/lib.rs:1:pub fn Lib() {}\nsrc/main.rs:1:fn main() {\nsrc/main.rs:5:fn helper() {}\n");
        let out = grep(dir.path(), json!({"pattern": "helper", "output_mode": "content", "-n": false})).await.unwrap();
        assert_eq!(out, "src/main.rs:    helper();\nsrc/main.rs:fn helper() {}\n");
    }

    #[tokio::test]
    async fn case_insensitive() {
        let dir = tree();
        let out = grep(dir.path(), json!({"pattern": "fn upper"})).await.unwrap();
        assert_eq!(out, "No matches found");
        let out = grep(dir.path(), json!({"pattern": "fn upper", "-i": true})).await.unwrap();
        assert_eq!(out, "notes.txt\n");
    }

    #[tokio::test]
    async fn context_lines() {
        let dir = tempfile::tempdir().unwrap();
        let text: String =
            (1..=12).map(|i| if i == 3 || i == 10 { format!("hit {i}\n") } else { format!("l{i}\n") }).collect();
        write(dir.path(), "a.txt", &text);
        write(dir.path(), "b.txt", "x\nhit b\n");
        let out =
            grep(dir.path(), json!({"pattern": "hit", "output_mode": "content", "-C": 1, "path": "."})).await.unwrap();
        assert_eq!(
            out,
            "a.txt-2-l2\na.txt:3:hit 3\na.txt-4-l4\n--\na.txt-9-l9\na.txt:10:hit 10\na.txt-11-l11\n--\nb.txt-1-x\nb.txt:2:hit b\n"
        );
        let out =
            grep(dir.path(), json!({"pattern": "hit 3", "output_mode": "content", "-A": 2, "-C": 0})).await.unwrap();
        assert_eq!(out, "a.txt:3:hit 3\na.txt-4-l4\na.txt-5-l5\n");
        let out = grep(dir.path(), json!({"pattern": "hit 3", "output_mode": "content", "-B": 1})).await.unwrap();
        assert_eq!(out, "a.txt-2-l2\na.txt:3:hit 3\n");
        // Context is ignored outside content mode.
        let out = grep(dir.path(), json!({"pattern": "hit", "output_mode": "count", "-C": 3})).await.unwrap();
        assert_eq!(out, "a.txt:2\nb.txt:1\n");
    }

    #[tokio::test]
    async fn glob_and_type_filters() {
        let dir = tree();
        let root = dir.path();
        assert_eq!(grep(root, json!({"pattern": "main", "glob": "*.py"})).await.unwrap(), "app.py\n");
        assert_eq!(grep(root, json!({"pattern": "main", "type": "py"})).await.unwrap(), "app.py\n");
        assert_eq!(grep(root, json!({"pattern": "main", "type": "rust"})).await.unwrap(), "src/main.rs\n");
        assert_eq!(grep(root, json!({"pattern": "main", "glob": "!*.rs"})).await.unwrap(), "app.py\n");
        assert_eq!(
            grep(root, json!({"pattern": "main|FN", "glob": "*.py *.txt"})).await.unwrap(),
            "app.py\nnotes.txt\n"
        );
        assert_eq!(
            grep(root, json!({"pattern": "fn", "glob": "src/*.{rs,py}"})).await.unwrap(),
            "src/lib.rs\nsrc/main.rs\n"
        );
        let err = grep(root, json!({"pattern": "x", "type": "nosuchtype"})).await.unwrap_err();
        assert!(err.0.contains("nosuchtype") && err.0.contains("rust"), "{err}");
        assert!(
            DynTool::validate(&Grep, &json!({"pattern": "x", "glob": "a[b"})).unwrap_err().contains("invalid glob")
        );
    }

    #[tokio::test]
    async fn a_single_file_as_path() {
        let dir = tree();
        let out =
            grep(dir.path(), json!({"pattern": "fn", "path": "src/main.rs", "output_mode": "count"})).await.unwrap();
        assert_eq!(out, "src/main.rs:2\n");
    }

    #[tokio::test]
    async fn head_limit() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            write(dir.path(), &format!("f{i}.txt"), "needle\nneedle\n");
        }
        let out = grep(dir.path(), json!({"pattern": "needle", "head_limit": 2})).await.unwrap();
        assert_eq!(out, "f0.txt\nf1.txt\n(head_limit: showing 2 of 5 lines; offset=2 continues)\n");
        let out =
            grep(dir.path(), json!({"pattern": "needle", "output_mode": "content", "head_limit": 3})).await.unwrap();
        assert_eq!(
            out,
            "f0.txt:1:needle\nf0.txt:2:needle\nf1.txt:1:needle\n(head_limit: showing 3 of 10 lines; offset=3 continues)\n"
        );
        let out = grep(dir.path(), json!({"pattern": "needle", "head_limit": 0})).await.unwrap();
        assert_eq!(out.lines().count(), 5);
        let out = grep(dir.path(), json!({"pattern": "needle", "head_limit": 50})).await.unwrap();
        assert_eq!(out.lines().count(), 5);
    }

    #[tokio::test]
    async fn offset_pages_with_head_limit() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            write(dir.path(), &format!("f{i}.txt"), "needle\n");
        }
        let page = |offset: usize| {
            let root = dir.path().to_path_buf();
            async move { grep(&root, json!({"pattern": "needle", "head_limit": 2, "offset": offset})).await.unwrap() }
        };
        assert_eq!(page(2).await, "f2.txt\nf3.txt\n(showing lines 3-4 of 5; offset=4 continues)\n");
        assert_eq!(page(4).await, "f4.txt\n(showing lines 5-5 of 5)\n");
        assert_eq!(page(9).await, "(offset 9 is past the end: the result has 5 lines)\n");
        let out = grep(dir.path(), json!({"pattern": "needle", "offset": 3, "output_mode": "count"})).await.unwrap();
        assert_eq!(out, "f3.txt:1\nf4.txt:1\n(showing lines 4-5 of 5)\n");
    }

    #[tokio::test]
    async fn only_matching_and_the_long_context_name() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.txt", "one\nid=12 and id=345\nthree\nfour\n");
        let out = grep(dir.path(), json!({"pattern": "id=[0-9]+", "output_mode": "content", "-o": true})).await.unwrap();
        assert_eq!(out, "a.txt:2:id=12\na.txt:2:id=345\n");
        // `-o` is for content; elsewhere it changes nothing.
        let out = grep(dir.path(), json!({"pattern": "id=[0-9]+", "-o": true})).await.unwrap();
        assert_eq!(out, "a.txt\n");
        let out = grep(dir.path(), json!({"pattern": "three", "output_mode": "content", "context": 1})).await.unwrap();
        assert_eq!(out, "a.txt-2-id=12 and id=345\na.txt:3:three\na.txt-4-four\n");
        let both = json!({"pattern": "three", "output_mode": "content", "context": 1, "-C": 0});
        assert_eq!(grep(dir.path(), both).await.unwrap(), "a.txt:3:three\n");
    }

    #[tokio::test]
    async fn multiline() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.rs", "struct Foo {\n    x: u32,\n}\nother\n");
        let input = json!({"pattern": "Foo \\{\\n\\s+x", "output_mode": "content"});
        let err = grep(dir.path(), input).await.unwrap_err();
        assert!(err.0.contains("multiline"), "{err}");
        let out = grep(dir.path(), json!({"pattern": "Foo \\{\\n\\s+x", "output_mode": "content", "multiline": true}))
            .await
            .unwrap();
        assert_eq!(out, "a.rs:1:struct Foo {\na.rs:2:    x: u32,\n");
        let out =
            grep(dir.path(), json!({"pattern": "Foo.*\\}", "multiline": true, "output_mode": "count"})).await.unwrap();
        assert_eq!(out, "a.rs:3\n");
    }

    #[tokio::test]
    async fn invalid_regex_is_named() {
        let dir = tree();
        let err = grep(dir.path(), json!({"pattern": "fn (unclosed"})).await.unwrap_err();
        assert!(err.0.starts_with("invalid regex \"fn (unclosed\"") && err.0.contains("unclosed group"), "{err}");
        let msg = DynTool::validate(&Grep, &json!({"pattern": "a{2,1}"})).unwrap_err();
        assert!(msg.contains("invalid regex"), "{msg}");
        assert!(DynTool::validate(&Grep, &json!({"pattern": "x", "output_mode": "lines"})).is_err());
        assert!(DynTool::validate(&Grep, &json!({"pattern": "x", "-x": true})).is_err());
    }

    #[tokio::test]
    async fn skips_binary_ignored_hidden_and_symlinked_files() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.txt", "needle outside\n");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "text.txt", "needle\n");
        std::fs::write(root.join("blob.bin"), b"needle\x00\x01\x02needle\n").unwrap();
        write(root, ".ignore", "ignored/\n");
        write(root, "ignored/x.txt", "needle\n");
        write(root, ".hidden.txt", "needle\n");
        write(root, ".git/config", "needle\n");
        std::os::unix::fs::symlink(outside.path(), root.join("linkdir")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), root.join("link.txt")).unwrap();
        let out = grep(root, json!({"pattern": "needle"})).await.unwrap();
        assert_eq!(out, "text.txt\n");
        let out = grep(root, json!({"pattern": "needle", "output_mode": "count"})).await.unwrap();
        assert_eq!(out, "text.txt:1\n");
    }

    #[tokio::test]
    async fn long_lines_are_cut_and_paths_outside_are_absolute() {
        let other = tempfile::tempdir().unwrap();
        write(other.path(), "long.txt", &format!("needle{}\n", "é".repeat(600)));
        let dir = tempfile::tempdir().unwrap();
        let path = other.path().to_str().unwrap();
        let out = grep(dir.path(), json!({"pattern": "needle", "path": path, "output_mode": "content"})).await.unwrap();
        let prefix = format!("{}:1:needle", other.path().join("long.txt").display());
        assert!(out.starts_with(&prefix), "{out}");
        assert!(out.ends_with(" [… 106 more characters]\n"), "{out}");
        assert_eq!(
            out.trim_end().chars().count(),
            prefix.chars().count() + 494 + " [… 106 more characters]".chars().count()
        );
        let err = grep(dir.path(), json!({"pattern": "x", "path": "nope"})).await.unwrap_err();
        assert!(err.0.contains("does not exist"), "{err}");
    }

    #[tokio::test]
    async fn metadata_and_cancellation() {
        let input = json!({"pattern": "x", "path": "src"});
        assert!(DynTool::is_read_only(&Grep, &input));
        assert!(DynTool::is_concurrency_safe(&Grep, &input));
        assert!(!DynTool::is_destructive(&Grep, &input));
        assert_eq!(DynTool::permission_subject(&Grep, &input).as_deref(), Some("src"));
        assert_eq!(DynTool::permission_subject(&Grep, &json!({"pattern": "x"})).as_deref(), Some("."));
        let schema = DynTool::input_schema(&Grep);
        for key in ["-i", "-n", "-A", "-B", "-C", "context", "-o", "type", "head_limit", "offset", "multiline"] {
            assert!(schema["properties"][key]["description"].is_string(), "{key}: {schema}");
        }
        assert!(schema.get("$defs").is_none(), "{schema}");
        assert!(schema["properties"]["output_mode"].to_string().contains("files_with_matches"), "{schema}");
        let dir = tree();
        let ctx = ctx(dir.path());
        ctx.cancel.cancel();
        assert_eq!(DynTool::call(&Grep, json!({"pattern": "fn"}), &ctx).await.unwrap_err().0, "cancelled");
    }
}
