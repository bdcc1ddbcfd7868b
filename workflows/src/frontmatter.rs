//! Front matter of Markdown files (agent definitions, skills, slash commands), read the
//! way Claude Code reads it, so that every file Claude Code takes is taken here too.
//!
//! Claude Code's rules, reproduced here:
//! - The block opens with `---` at the very start of the file, optional whitespace and a
//!   line break; it ends at the first `---` after that (even one inside a line), and any
//!   whitespace after that `---` is dropped from the body.
//! - The block is parsed as YAML. When that fails, it is parsed once more after every
//!   top-level `key: value` line whose value holds a YAML indicator (`{ } [ ] * & # ! | >
//!   % @` and backtick, or `: `) and is not already quoted has had its value put in
//!   double quotes. This is what makes an unquoted colon in a one-line `description`
//!   work. Lines that end in a carriage return are left alone, as Claude Code's pattern
//!   does not match them, so a CRLF file with such a colon fails.
//! - When both attempts fail, or the YAML is not a mapping, the file has no fields; what
//!   that means is up to the caller (an agent file without `name` is not loaded). A key
//!   given twice is a failure, as in the `yaml` package Claude Code uses.

use std::collections::BTreeMap;

use serde_json::Value;

/// The front matter of one file and the Markdown after it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrontMatter {
    /// The keys of the block; empty when there is no block or it does not parse.
    pub fields: BTreeMap<String, Value>,
    /// The text after the block (the whole file when there is none).
    pub body: String,
    /// Whether the file starts with a front matter block at all.
    pub found: bool,
    /// Why the block was not used, when it did not parse.
    pub problem: Option<String>,
    /// The block parsed only after quoting values (see the module documentation).
    pub requoted: bool,
}

/// JavaScript's `\s`: what Claude Code's patterns treat as whitespace.
fn js_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// Splits `text` into the block's text and the body, as Claude Code's pattern
/// `^---\s*\n([\s\S]*?)---\s*\n?` does.
fn split(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix("---")?;
    // `\s*\n`: the whitespace run after the opening dashes, up to its last line break.
    let run = rest.find(|c: char| !js_space(c)).unwrap_or(rest.len());
    let newline = rest[..run].rfind('\n')?;
    let front_start = newline + 1;
    let close = rest[front_start..].find("---")?;
    let front = &rest[front_start..front_start + close];
    let after = &rest[front_start + close + 3..];
    // `\s*\n?`: the greedy whitespace run eats every space and line break after it.
    let body_start = after.find(|c: char| !js_space(c)).unwrap_or(after.len());
    Some((front, &after[body_start..]))
}

/// The YAML indicators that make Claude Code quote a value on its second attempt.
fn needs_quotes(value: &str) -> bool {
    value.contains(": ") || value.chars().any(|c| "{}[]*&#!|>%@`".contains(c))
}

/// A line as `key: value` in Claude Code's sense (`^([a-zA-Z_-]+):\s+(.+)$`), or `None`.
fn key_value(line: &str) -> Option<(&str, &str)> {
    let key_end = line.find(|c: char| !(c.is_ascii_alphabetic() || c == '_' || c == '-')).unwrap_or(line.len());
    if key_end == 0 {
        return None;
    }
    let after = line[key_end..].strip_prefix(':')?;
    if !after.starts_with(js_space) {
        return None;
    }
    // `.` stops at line terminators, so a value holding one does not match.
    if after.contains(['\r', '\u{2028}', '\u{2029}']) {
        return None;
    }
    let value = after.trim_start_matches(js_space);
    if value.is_empty() {
        // Only whitespace follows: the pattern matches a blank value, which never needs quotes.
        return None;
    }
    Some((&line[..key_end], value))
}

/// The block with the values that need it put in double quotes.
fn requote(front: &str) -> String {
    let lines: Vec<String> = front
        .split('\n')
        .map(|line| match key_value(line) {
            Some((key, value)) => {
                let quoted = (value.starts_with('"') && value.ends_with('"'))
                    || (value.starts_with('\'') && value.ends_with('\''));
                if quoted || !needs_quotes(value) {
                    line.to_string()
                } else {
                    format!("{key}: \"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
                }
            }
            None => line.to_string(),
        })
        .collect();
    lines.join("\n")
}

/// Why a block is not YAML, and the line of the block (1-based) where, when known.
type NotYaml = (String, Option<usize>);

/// The first of `errors`, with its line.
fn first_error(errors: &[crate::yaml::YamlError], fallback: &str) -> NotYaml {
    match errors.first() {
        Some(e) => (e.message.clone(), Some(e.span.start.line).filter(|l| *l > 0)),
        None => (fallback.to_string(), None),
    }
}

/// The block as a mapping: `Ok(None)` when it parses to something else (nothing, a
/// list, a scalar), `Err` when it is not YAML.
fn mapping(front: &str) -> Result<Option<BTreeMap<String, Value>>, NotYaml> {
    match crate::yaml::parse(front) {
        // The `yaml` package Claude Code uses refuses a key given twice.
        Ok((_, duplicates)) if !duplicates.is_empty() => Err(first_error(&duplicates, "duplicate key")),
        Ok((Some(node), _)) => {
            if node.entries().is_none() {
                return Ok(None);
            }
            crate::de::from_node::<BTreeMap<String, Value>>(&node, Vec::new(), None)
                .map(Some)
                .map_err(|e| (e.to_string(), None))
        }
        Ok((None, _)) => Ok(None),
        Err(errors) => Err(first_error(&errors, "invalid YAML")),
    }
}

/// Reads the front matter of `text`. As in Claude Code, a byte order mark before the
/// opening `---` means there is no front matter.
pub fn parse(text: &str) -> FrontMatter {
    let Some((front, body)) = split(text) else {
        return FrontMatter { body: text.to_string(), ..FrontMatter::default() };
    };
    let mut out = FrontMatter { body: body.to_string(), found: true, ..FrontMatter::default() };
    match mapping(front) {
        Ok(fields) => out.fields = fields.unwrap_or_default(),
        Err(_) => match mapping(&requote(front)) {
            Ok(fields) => {
                out.fields = fields.unwrap_or_default();
                out.requoted = true;
            }
            Err((e, line)) => {
                // The block starts on the line after the opening `---` (or later, after
                // blank lines); `requote` keeps the lines where they were.
                let offset = (front.as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
                let first = text.get(..offset).unwrap_or_default().matches('\n').count() + 1;
                out.problem = Some(match line {
                    Some(line) => format!("line {}: the front matter is not valid YAML ({e})", first + line - 1),
                    None => format!("the front matter is not valid YAML ({e})"),
                });
            }
        },
    }
    out
}

/// A text field: `None` when absent, null or not text.
pub fn text<'a>(fields: &'a BTreeMap<String, Value>, key: &str) -> Option<&'a str> {
    fields.get(key).and_then(Value::as_str)
}

/// A list of names given as comma-separated text or as a YAML list. Commas inside
/// parentheses (`Bash(git add:*)`) do not split. `None` when the key is absent or null.
pub fn name_list(fields: &BTreeMap<String, Value>, key: &str) -> Option<Vec<String>> {
    let value = fields.get(key)?;
    let mut items = Vec::new();
    let mut push_split = |s: &str| {
        let mut depth = 0usize;
        let mut current = String::new();
        for c in s.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            }
            current.push(c);
        }
        items.push(current);
    };
    match value {
        Value::Null => return None,
        Value::String(s) => push_split(s),
        Value::Array(list) => {
            for item in list {
                match item {
                    Value::String(s) => push_split(s),
                    Value::Number(n) => push_split(&n.to_string()),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    Some(items.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_claude_code() {
        let fm = parse("---\nname: a\n---\n\nbody\n");
        assert!(fm.found);
        assert_eq!(text(&fm.fields, "name"), Some("a"));
        assert_eq!(fm.body, "body\n");
        let none = parse("# title\n---\nname: a\n---\n");
        assert!(!none.found);
        assert!(none.fields.is_empty());
        // The block ends at the first `---`, even inside a line.
        let cut = parse("---\nname: a---b\n---\nbody");
        assert_eq!(text(&cut.fields, "name"), Some("a"));
        // Spaces after the opening dashes, and CRLF line ends.
        let crlf = parse("---  \r\nname: a\r\ndescription: d\r\n---\r\nbody");
        assert_eq!(text(&crlf.fields, "description"), Some("d"));
        assert_eq!(crlf.body, "body");
    }

    #[test]
    fn a_colon_in_a_value_is_requoted() {
        let fm = parse("---\nname: a\ndescription: Use it when: things break. See C# and [x]\n---\nb");
        assert!(fm.requoted);
        assert_eq!(text(&fm.fields, "description"), Some("Use it when: things break. See C# and [x]"));
        let quotes = parse("---\nname: a\ndescription: say \"hi\": \\o/\n---\nb");
        assert_eq!(text(&quotes.fields, "description"), Some("say \"hi\": \\o/"));
        // With CRLF line ends the retry pattern does not match, so the block fails.
        let crlf = parse("---\r\nname: a\r\ndescription: when: this\r\n---\r\nb");
        assert!(crlf.fields.is_empty());
        assert!(crlf.problem.is_some());
    }

    #[test]
    fn unindented_continuation_lines_fail() {
        let fm = parse("---\nname: a\ndescription: Use it. Examples:\n<example>\nuser: hi\n</example>\n---\nb");
        assert!(fm.fields.is_empty());
        assert!(fm.problem.as_deref().unwrap_or("").contains("not valid YAML"));
    }

    #[test]
    fn a_problem_names_the_line_of_the_file() {
        // The entry that breaks starts on the file's third line (the block on its second);
        // the parser may point at it or at the line after.
        let fm = parse("---\nname: a\ndescription: Use it. Examples:\n<example>\nuser: hi\n---\nb");
        let problem = fm.problem.unwrap_or_default();
        let line: usize = problem
            .strip_prefix("line ")
            .and_then(|rest| rest.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no line in {problem:?}"));
        assert!((3..=5).contains(&line), "{problem}");
        // Blank lines before the block move it down.
        let later = parse("---\n\n\nname: a\ndescription: Use it. Examples:\n<example>\nuser: hi\n---\nb");
        assert!(later.problem.unwrap_or_default().starts_with(&format!("line {}:", line + 2)));
    }

    #[test]
    fn lists_split_outside_parentheses() {
        let fm = parse("---\ntools: Read, Bash(git add:*, git commit:*), Grep\nother: [A, 'B, C']\n---\n");
        assert_eq!(
            name_list(&fm.fields, "tools").unwrap(),
            vec!["Read".to_string(), "Bash(git add:*, git commit:*)".into(), "Grep".into()]
        );
        assert_eq!(name_list(&fm.fields, "other").unwrap(), vec!["A".to_string(), "B".into(), "C".into()]);
        assert_eq!(name_list(&fm.fields, "missing"), None);
    }
}
