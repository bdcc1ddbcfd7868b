//! Diagnostics: an error message tied to `file:line:column`, with a hint on how to fix it.
//!
//! Rendering follows rustc and cargo, in plain text (no colour):
//!
//! ```text
//! error: unknown tool `Raed` in `agents.survey.tools`
//!  --> review.yaml:5:13
//!   |
//! 5 |     tools: [Raed, Grep]
//!   |             ^^^^
//!   = help: did you mean `Read`? The known tools are: Read, Write, …
//! ```
//!
//! Every diagnostic carries its source line, so it renders without the file at hand.

use std::fmt::Write as _;
use std::sync::Arc;

use serde::Serialize;

use crate::yaml::{Node, Span, Style};

/// Where a diagnostic points: a file, a 1-based line and a 1-based column (in
/// characters), how many characters to underline, and the text of that line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub file: String,
    pub line: usize,
    pub column: usize,
    /// Characters to underline, at least 1.
    #[serde(skip)]
    pub len: usize,
    /// The source line, without its line break.
    #[serde(skip)]
    pub source_line: String,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// One error in a workflow: what is wrong, where, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{location}: {message}")]
pub struct Diagnostic {
    pub message: String,
    pub location: Location,
    /// How to fix it.
    pub hint: String,
    /// Extra context ("`fix` is first defined at line 3").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Diagnostic {
    pub fn new(message: impl Into<String>, location: Location, hint: impl Into<String>) -> Diagnostic {
        Diagnostic { message: message.into(), location, hint: hint.into(), notes: Vec::new() }
    }

    #[must_use]
    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    /// The rustc-style text of this diagnostic, ending with a newline.
    pub fn render(&self) -> String {
        let loc = &self.location;
        let number = loc.line.to_string();
        let gutter = " ".repeat(number.len());
        let (line_text, column) = expand_tabs(&loc.source_line, loc.column.saturating_sub(1));
        let available = line_text.chars().count().saturating_sub(column).max(1);
        let carets = "^".repeat(loc.len.clamp(1, available));
        let mut out = String::new();
        let _ = writeln!(out, "error: {}", self.message);
        let _ = writeln!(out, "{gutter}--> {loc}");
        let _ = writeln!(out, "{gutter} |");
        let _ = writeln!(out, "{number} | {}", line_text.trim_end());
        let _ = writeln!(out, "{gutter} | {}{carets}", " ".repeat(column));
        for note in &self.notes {
            let _ = writeln!(out, "{gutter} = note: {note}");
        }
        let _ = writeln!(out, "{gutter} = help: {}", self.hint);
        out
    }
}

/// Renders several diagnostics, one after the other, separated by blank lines.
pub fn render_diagnostics(diagnostics: &[Diagnostic]) -> String {
    diagnostics.iter().map(Diagnostic::render).collect::<Vec<_>>().join("\n")
}

/// Tabs shown as four spaces, the column moved to match.
fn expand_tabs(line: &str, column: usize) -> (String, usize) {
    let mut out = String::new();
    let mut new_column = column;
    for (i, c) in line.chars().enumerate() {
        if c == '\t' {
            out.push_str("    ");
            if i < column {
                new_column += 3;
            }
        } else {
            out.push(c);
        }
    }
    (out, new_column)
}

/// A loaded file: its name and text, for turning spans into [`Location`]s.
#[derive(Debug, Clone)]
pub(crate) struct SourceFile {
    pub name: String,
    pub text: Arc<str>,
    lines: Vec<(usize, usize)>,
}

impl SourceFile {
    pub fn new(name: &str, text: &str) -> SourceFile {
        let mut lines = Vec::new();
        let mut start = 0;
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                let end = if i > start && text.as_bytes()[i - 1] == b'\r' { i - 1 } else { i };
                lines.push((start, end));
                start = i + 1;
            }
        }
        if start < text.len() {
            lines.push((start, text.len()));
        }
        SourceFile { name: name.to_string(), text: Arc::from(text), lines }
    }

    /// The text of a 1-based line (empty past the end).
    pub fn line(&self, line: usize) -> &str {
        match line.checked_sub(1).and_then(|i| self.lines.get(i)) {
            Some(&(start, end)) => &self.text[start..end],
            None => "",
        }
    }

    /// A location at a 1-based line and 0-based character column.
    pub fn at(&self, line: usize, col: usize, len: usize) -> Location {
        let line = line.max(1);
        Location {
            file: self.name.clone(),
            line,
            column: col + 1,
            len: len.max(1),
            source_line: self.line(line).to_string(),
        }
    }

    /// The location of a span: its start, underlined to its end (or to the end of the
    /// line when the span runs over several lines).
    pub fn span(&self, span: Span) -> Location {
        let len = if span.end.line <= span.start.line {
            span.end.col.saturating_sub(span.start.col).max(1)
        } else {
            self.line(span.start.line).chars().count().saturating_sub(span.start.col)
        };
        self.at(span.start.line, span.start.col, len)
    }

    /// The location of `byte_offset..byte_offset + byte_len` inside the text of the
    /// string scalar `node`. Falls back to the start of the scalar when the text cannot
    /// be mapped back onto the source (escapes, folding).
    pub fn inside(&self, node: &Node, value: &str, byte_offset: usize, byte_len: usize) -> Location {
        let style = match &node.kind {
            crate::yaml::Kind::Scalar { style, .. } => *style,
            _ => return self.span(node.span),
        };
        let byte_offset = byte_offset.min(value.len());
        let Some(before) = value.get(..byte_offset) else { return self.span(node.span) };
        let line_index = before.matches('\n').count();
        let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let col_in_line = before[line_start..].chars().count();
        let rest = &value[byte_offset..];
        let len = rest.get(..byte_len.min(rest.len())).map(|s| s.chars().take_while(|&c| c != '\n').count());
        let len = len.unwrap_or(1);
        let fallback = self.at(node.span.start.line, node.span.start.col, len);
        match style {
            Style::Plain | Style::SingleQuoted | Style::DoubleQuoted => {
                if value.contains('\n') || node.span.start.line != node.span.end.line {
                    return fallback;
                }
                let quote = usize::from(style != Style::Plain);
                let source: String = self
                    .line(node.span.start.line)
                    .chars()
                    .skip(node.span.start.col + quote)
                    .take(value.chars().count())
                    .collect();
                if source != value {
                    return fallback;
                }
                self.at(node.span.start.line, node.span.start.col + quote + col_in_line, len)
            }
            Style::Literal => {
                let Some(content) = value.split('\n').nth(line_index) else { return fallback };
                let line = node.span.start.line + line_index;
                let source = self.line(line);
                if !source.ends_with(content) {
                    return fallback;
                }
                let indent = source.chars().count() - content.chars().count();
                self.at(line, indent + col_in_line, len)
            }
            Style::Folded => fallback,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_rustc() {
        let source = SourceFile::new("wf.yaml", "agents:\n  a:\n    tools: [Raed]\n");
        let diagnostic =
            Diagnostic::new("unknown tool `Raed`", source.at(3, 12, 4), "did you mean `Read`?").with_note("a note");
        assert_eq!(
            diagnostic.render(),
            "error: unknown tool `Raed`\n --> wf.yaml:3:13\n  |\n3 |     tools: [Raed]\n  |             ^^^^\n  \
             = note: a note\n  = help: did you mean `Read`?\n"
        );
        assert_eq!(diagnostic.to_string(), "wf.yaml:3:13: unknown tool `Raed`");
    }

    #[test]
    fn lines_handle_crlf_and_missing_final_newline() {
        let source = SourceFile::new("f", "a\r\nb");
        assert_eq!(source.line(1), "a");
        assert_eq!(source.line(2), "b");
        assert_eq!(source.line(3), "");
    }

    #[test]
    fn tabs_keep_carets_aligned() {
        let (line, column) = expand_tabs("\tx", 1);
        assert_eq!(line, "    x");
        assert_eq!(column, 4);
    }
}
