//! A YAML tree that remembers where every node came from.
//!
//! The tree is built from `saphyr-parser` events, so every scalar, list, mapping and
//! mapping key carries its span (line and column). Scalars are resolved with the YAML 1.2
//! core schema (`yes`/`no`/`on`/`off` stay text). Unlike most loaders, a key that appears
//! twice in one mapping is an error, not a silent overwrite; the first occurrence is
//! kept so that loading can go on and report more problems. Anchors and aliases work;
//! tags other than the core ones (`!!str`, `!!int`, ...) and multiple documents are
//! errors.
//!
//! Input is bounded: [`read_capped`] stops reading a file at [`MAX_FILE_BYTES`], and the
//! nodes that aliases copy are counted against [`MAX_ALIAS_EXPANSION`], so a nested-alias
//! bomb ("billion laughs") fails at the alias that crosses the budget instead of using
//! gigabytes. [`load_value`] is the one positioned loader for every other YAML file orch
//! reads: same caps, same `file:line:column` diagnostics.

use std::collections::HashMap;
use std::path::Path;

use saphyr_parser::{Event, Parser, ScalarStyle, Span as ParserSpan, StrInput};
use serde_json::Value;

use crate::diagnostic::{Diagnostic, SourceFile};

/// Mappings and lists nested deeper than this are refused (a stack guard).
const MAX_DEPTH: usize = 64;

/// The default cap on the size of a file orch parses: 1 MiB.
pub const MAX_FILE_BYTES: usize = 1 << 20;

/// The most that aliases may copy in one document, in approximate bytes: each node
/// copied counts [`NODE_WEIGHT`], and each scalar its text twice (the raw text and the
/// value). A workflow that reuses a list of tools in a thousand agents stays far below.
pub const MAX_ALIAS_EXPANSION: usize = 16 << 20;

/// What one node counts against [`MAX_ALIAS_EXPANSION`], besides its text.
const NODE_WEIGHT: usize = 64;

/// A position in the source: 1-based line, 0-based column in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub(crate) struct Pos {
    pub line: usize,
    pub col: usize,
}

/// A range of the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Span {
    pub start: Pos,
    pub end: Pos,
}

impl Span {
    fn from_parser(span: ParserSpan) -> Span {
        Span {
            start: Pos { line: span.start.line(), col: span.start.col() },
            end: Pos { line: span.end.line(), col: span.end.col() },
        }
    }

    fn cover(start: Span, end: Span) -> Span {
        Span { start: start.start, end: end.end }
    }
}

/// How a scalar was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    Plain,
    SingleQuoted,
    DoubleQuoted,
    Literal,
    Folded,
}

impl From<ScalarStyle> for Style {
    fn from(style: ScalarStyle) -> Style {
        match style {
            ScalarStyle::Plain => Style::Plain,
            ScalarStyle::SingleQuoted => Style::SingleQuoted,
            ScalarStyle::DoubleQuoted => Style::DoubleQuoted,
            ScalarStyle::Literal => Style::Literal,
            ScalarStyle::Folded => Style::Folded,
        }
    }
}

/// A resolved scalar value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

/// One node of the tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub kind: Kind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// `raw` is the text as the parser delivered it (quotes removed, escapes applied).
    Scalar {
        value: Scalar,
        raw: String,
        style: Style,
    },
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

/// One `key: value` pair of a mapping. Keys are always text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub key: String,
    pub key_span: Span,
    pub value: Node,
}

/// A problem found while building the tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct YamlError {
    pub message: String,
    pub hint: String,
    pub span: Span,
    pub notes: Vec<String>,
}

/// One path segment from the root to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seg {
    Key(String),
    Index(usize),
}

impl Seg {
    pub fn key(key: &str) -> Seg {
        Seg::Key(key.to_string())
    }
}

/// `agents.fix.tools[2]`.
pub(crate) fn path_string(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

impl Node {
    /// An empty mapping, as a placeholder.
    pub fn empty() -> Node {
        Node { kind: Kind::Map(Vec::new()), span: Span::default() }
    }

    /// The entries of a mapping, or `None`.
    pub fn entries(&self) -> Option<&[Entry]> {
        match &self.kind {
            Kind::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The entry under `key`, if this is a mapping that has it.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries()?.iter().find(|e| e.key == key)
    }

    /// The text of a string scalar.
    #[cfg(test)]
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar { value: Scalar::Str(s), .. } => Some(s),
            _ => None,
        }
    }

    /// Follows `path` down from this node. Returns the node and, when the last segment
    /// is a key, the span of that key.
    pub fn find(&self, path: &[Seg]) -> Option<(&Node, Option<Span>)> {
        let mut node = self;
        let mut key_span = None;
        for seg in path {
            match (seg, &node.kind) {
                (Seg::Key(key), Kind::Map(entries)) => {
                    let entry = entries.iter().find(|e| &e.key == key)?;
                    key_span = Some(entry.key_span);
                    node = &entry.value;
                }
                (Seg::Index(i), Kind::Seq(items)) => {
                    node = items.get(*i)?;
                    key_span = None;
                }
                _ => return None,
            }
        }
        Some((node, key_span))
    }

    /// Removes the node at `path` (a mapping entry or a list item). Returns whether
    /// something was removed.
    pub fn remove(&mut self, path: &[Seg]) -> bool {
        let Some((last, parent)) = path.split_last() else { return false };
        let mut node = self;
        for seg in parent {
            node = match (seg, &mut node.kind) {
                (Seg::Key(key), Kind::Map(entries)) => match entries.iter_mut().find(|e| &e.key == key) {
                    Some(entry) => &mut entry.value,
                    None => return false,
                },
                (Seg::Index(i), Kind::Seq(items)) => match items.get_mut(*i) {
                    Some(item) => item,
                    None => return false,
                },
                _ => return false,
            };
        }
        match (last, &mut node.kind) {
            (Seg::Key(key), Kind::Map(entries)) => {
                let before = entries.len();
                entries.retain(|e| &e.key != key);
                entries.len() < before
            }
            (Seg::Index(i), Kind::Seq(items)) if *i < items.len() => {
                items.remove(*i);
                true
            }
            _ => false,
        }
    }

    /// A short description of what this node is, for "found ..." messages.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Scalar { value, raw, .. } => match value {
                Scalar::Null => "empty".to_string(),
                Scalar::Bool(b) => format!("`{b}`"),
                Scalar::Int(_) | Scalar::Float(_) => format!("the number `{raw}`"),
                Scalar::Str(s) => format!("the text `{}`", shorten(s)),
            },
            Kind::Seq(_) => "a list".to_string(),
            Kind::Map(_) => "a mapping".to_string(),
        }
    }
}

/// Cuts long text for messages.
pub(crate) fn shorten(s: &str) -> String {
    let first_line = s.lines().next().unwrap_or("");
    let mut out: String = first_line.chars().take(40).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// Parses `bytes`, the contents of the YAML file `name`, into plain data, with the caps
/// and checks of workflow files: at most [`MAX_FILE_BYTES`], UTF-8, no control
/// characters, aliases within [`MAX_ALIAS_EXPANSION`], no duplicate keys, one document.
/// An empty document is `null`. The error names `name:line:column`.
#[allow(clippy::result_large_err)] // one error per file, made once
pub fn load_value(name: &str, bytes: &[u8]) -> Result<Value, Diagnostic> {
    load_value_capped(name, bytes, MAX_FILE_BYTES)
}

/// [`load_value`] with another size cap.
#[allow(clippy::result_large_err)] // one error per file, made once
pub fn load_value_capped(name: &str, bytes: &[u8], max_bytes: usize) -> Result<Value, Diagnostic> {
    let (source, root) = load_tree(name, bytes, max_bytes)?;
    match root {
        None => Ok(Value::Null),
        Some(node) => to_value(&node).map_err(|span| {
            Diagnostic::new(
                "this number cannot be represented (`.inf` and `.nan` are not plain data)",
                source.span(span),
                "write a finite number, or quote the value to keep it as text",
            )
        }),
    }
}

/// Parses `bytes` like [`load_value`] (same caps and checks) and deserializes a `T`
/// straight from the positioned tree, so a wrong type, an unknown key or a missing key
/// also names `name:line:column`. An empty document deserializes from `null`.
#[allow(clippy::result_large_err)] // one error per file, made once
pub fn load_as<T: serde::de::DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<T, Diagnostic> {
    load_as_capped(name, bytes, MAX_FILE_BYTES)
}

/// [`load_as`] with another size cap (recorded model scripts grow past 1 MiB).
#[allow(clippy::result_large_err)] // one error per file, made once
pub fn load_as_capped<T: serde::de::DeserializeOwned>(
    name: &str,
    bytes: &[u8],
    max_bytes: usize,
) -> Result<T, Diagnostic> {
    let (source, root) = load_tree(name, bytes, max_bytes)?;
    match root {
        Some(node) => {
            crate::de::from_node::<T>(&node, Vec::new(), None).map_err(|e| crate::load::de_diagnostic(&source, e))
        }
        None => T::deserialize(Value::Null).map_err(|e| {
            Diagnostic::new(format!("the file is empty: {e}"), source.at(1, 0, 1), "write the document's contents")
        }),
    }
}

/// Reads the YAML file at `path` (stopping at [`MAX_FILE_BYTES`]) and loads it with
/// [`load_as`].
#[allow(clippy::result_large_err)] // one error per file, made once
pub fn load_file_as<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, Diagnostic> {
    load_file_as_capped(path, MAX_FILE_BYTES)
}

/// [`load_file_as`] with another size cap.
#[allow(clippy::result_large_err)] // one error per file, made once
pub fn load_file_as_capped<T: serde::de::DeserializeOwned>(path: &Path, max_bytes: usize) -> Result<T, Diagnostic> {
    let bytes = crate::input::read_capped(path, max_bytes, "the file")?;
    load_as_capped(&path.display().to_string(), &bytes, max_bytes)
}

/// The checked text and its tree (`None` for a file with no document); the first error
/// as a diagnostic.
#[allow(clippy::result_large_err)] // one error per file, made once
fn load_tree(name: &str, bytes: &[u8], max_bytes: usize) -> Result<(SourceFile, Option<Node>), Diagnostic> {
    let text = crate::input::decode(name, bytes, max_bytes)?;
    let source = SourceFile::new(name, text);
    let to_diagnostic = |e: YamlError| {
        let mut diagnostic = Diagnostic::new(e.message, source.span(e.span), e.hint);
        diagnostic.notes = e.notes;
        diagnostic
    };
    let root = match parse(text) {
        Ok((root, errors)) => match errors.into_iter().next() {
            Some(first) => return Err(to_diagnostic(first)),
            None => root,
        },
        Err(errors) => {
            return Err(errors.into_iter().next().map(to_diagnostic).unwrap_or_else(|| {
                Diagnostic::new("invalid YAML", source.at(1, 0, 1), "check the syntax of the file")
            }));
        }
    };
    Ok((source, root))
}

/// Reads the YAML file at `path` (stopping at [`MAX_FILE_BYTES`]) and loads it with
/// [`load_value`].
#[allow(clippy::result_large_err)] // one error per file, made once
pub fn load_value_file(path: &Path) -> Result<Value, Diagnostic> {
    let bytes = crate::input::read_capped(path, MAX_FILE_BYTES, "the file")?;
    load_value(&path.display().to_string(), &bytes)
}

/// Plain data from a tree; the error is the span of a number JSON cannot hold.
fn to_value(node: &Node) -> Result<Value, Span> {
    Ok(match &node.kind {
        Kind::Scalar { value, .. } => match value {
            Scalar::Null => Value::Null,
            Scalar::Bool(b) => Value::Bool(*b),
            Scalar::Int(n) => Value::from(*n),
            Scalar::Float(f) => Value::Number(serde_json::Number::from_f64(*f).ok_or(node.span)?),
            Scalar::Str(s) => Value::String(s.clone()),
        },
        Kind::Seq(items) => Value::Array(items.iter().map(to_value).collect::<Result<_, _>>()?),
        Kind::Map(entries) => Value::Object(
            entries.iter().map(|e| Ok((e.key.clone(), to_value(&e.value)?))).collect::<Result<_, Span>>()?,
        ),
    })
}

/// Parses one YAML document. `Ok(None)` means the text holds no document at all.
/// Non-fatal problems (duplicate keys) come back next to the tree; a syntax error is
/// fatal and comes back alone (after any duplicate keys found before it).
pub(crate) fn parse(text: &str) -> Result<(Option<Node>, Vec<YamlError>), Vec<YamlError>> {
    let mut builder = Builder {
        parser: Parser::new_from_str(text),
        anchors: HashMap::new(),
        errors: Vec::new(),
        produced: 0,
        expanded: 0,
    };
    match builder.document() {
        Ok(node) => Ok((node, builder.errors)),
        Err(fatal) => {
            let mut errors = builder.errors;
            errors.push(fatal);
            Err(errors)
        }
    }
}

struct Builder<'a> {
    parser: Parser<'a, StrInput<'a>>,
    /// Each anchor's node and its weight (see [`MAX_ALIAS_EXPANSION`]).
    anchors: HashMap<usize, (Node, usize)>,
    errors: Vec<YamlError>,
    /// The weight of every node built so far, copies included.
    produced: usize,
    /// The weight of the nodes that aliases copied.
    expanded: usize,
}

fn syntax_hint(info: &str) -> String {
    let info = info.to_ascii_lowercase();
    if info.contains("tab") {
        "indent with spaces: YAML does not allow tabs for indentation".to_string()
    } else if info.contains("alias") || info.contains("anchor") {
        "define the anchor (`&name`) before using it as an alias (`*name`)".to_string()
    } else if info.contains("flow") || info.contains("']'") || info.contains("'}'") {
        "close every `[` with `]` and every `{` with `}`; quote values that contain `,`, `[`, `]`, `{` or `}`"
            .to_string()
    } else {
        "check the indentation and brackets here and above (is a `[` or `{` left open?); quote any value that \
         contains `: ` or ` #`, or that starts with `{`, `[`, `*`, `&`, `!`, `|`, `>`, `%`, `@` or a backtick"
            .to_string()
    }
}

impl<'a> Builder<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), YamlError> {
        match self.parser.next_event() {
            Some(Ok((event, span))) => Ok((event, Span::from_parser(span))),
            Some(Err(e)) => {
                let mark = e.marker();
                let pos = Pos { line: mark.line(), col: mark.col() };
                Err(YamlError {
                    message: format!("invalid YAML: {}", e.info()),
                    hint: syntax_hint(e.info()),
                    span: Span { start: pos, end: pos },
                    notes: Vec::new(),
                })
            }
            None => Err(YamlError {
                message: "invalid YAML: the document ends too early".to_string(),
                hint: "check that every list and mapping is complete".to_string(),
                span: Span::default(),
                notes: Vec::new(),
            }),
        }
    }

    fn document(&mut self) -> Result<Option<Node>, YamlError> {
        let mut root = None;
        loop {
            let (event, span) = self.next()?;
            match event {
                Event::StreamStart | Event::Nothing => {}
                Event::StreamEnd => return Ok(root),
                Event::DocumentStart(_) => {
                    if root.is_some() {
                        return Err(YamlError {
                            message: "a workflow file holds one YAML document, this is a second one".to_string(),
                            hint: "remove the `---` line and everything after it, or move it to its own file"
                                .to_string(),
                            span,
                            notes: Vec::new(),
                        });
                    }
                    let (event, span) = self.next()?;
                    if matches!(event, Event::DocumentEnd) {
                        continue;
                    }
                    root = Some(self.node(event, span, 0)?);
                }
                Event::DocumentEnd => {}
                _ => return Err(unexpected(span)),
            }
        }
    }

    fn node(&mut self, event: Event<'a>, span: Span, depth: usize) -> Result<Node, YamlError> {
        if depth > MAX_DEPTH {
            return Err(YamlError {
                message: format!("the YAML is nested more than {MAX_DEPTH} levels deep"),
                hint: "flatten the structure".to_string(),
                span,
                notes: Vec::new(),
            });
        }
        let before = self.produced;
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let forced_str = match tag.as_deref() {
                    None => false,
                    Some(tag) if tag.is_yaml_core_schema() => tag.suffix == "str",
                    Some(tag) => return Err(unsupported_tag(&tag.to_string(), span)),
                };
                let style = Style::from(style);
                let raw = text.into_owned();
                let value =
                    if forced_str || style != Style::Plain { Scalar::Str(raw.clone()) } else { resolve_plain(&raw) };
                self.produced += NODE_WEIGHT + 2 * raw.len();
                let node = Node { kind: Kind::Scalar { value, raw, style }, span };
                self.remember(anchor, &node, before);
                Ok(node)
            }
            Event::SequenceStart(anchor, tag) => {
                check_tag(tag.as_deref(), span)?;
                let mut items = Vec::new();
                let end = loop {
                    let (event, item_span) = self.next()?;
                    if matches!(event, Event::SequenceEnd) {
                        break item_span;
                    }
                    items.push(self.node(event, item_span, depth + 1)?);
                };
                let whole = match (items.first(), items.last()) {
                    (Some(first), Some(last)) => Span::cover(first.span, last.span),
                    _ => Span::cover(span, end),
                };
                self.produced += NODE_WEIGHT;
                let node = Node { kind: Kind::Seq(items), span: whole };
                self.remember(anchor, &node, before);
                Ok(node)
            }
            Event::MappingStart(anchor, tag) => {
                check_tag(tag.as_deref(), span)?;
                let mut entries: Vec<Entry> = Vec::new();
                let mut seen: HashMap<String, Span> = HashMap::new();
                let end = loop {
                    let (event, key_span) = self.next()?;
                    if matches!(event, Event::MappingEnd) {
                        break key_span;
                    }
                    let key_node = self.node(event, key_span, depth + 1)?;
                    let key = match key_node.kind {
                        Kind::Scalar { raw, .. } => raw,
                        Kind::Map(_) => return Err(complex_key(key_node.span, true)),
                        Kind::Seq(_) => return Err(complex_key(key_node.span, false)),
                    };
                    let (event, value_span) = self.next()?;
                    let value = self.node(event, value_span, depth + 1)?;
                    if let Some(first) = seen.get(&key) {
                        self.errors.push(YamlError {
                            message: format!("duplicate key `{key}`"),
                            hint: format!(
                                "each key may appear once in a mapping: rename or remove one of the two `{key}` entries"
                            ),
                            span: key_node.span,
                            notes: vec![format!("`{key}` is first defined at line {}", first.start.line)],
                        });
                        continue;
                    }
                    seen.insert(key.clone(), key_node.span);
                    entries.push(Entry { key, key_span: key_node.span, value });
                };
                let whole = match (entries.first(), entries.last()) {
                    (Some(first), Some(last)) => Span::cover(first.key_span, last.value.span),
                    _ => Span::cover(span, end),
                };
                self.produced += NODE_WEIGHT;
                let node = Node { kind: Kind::Map(entries), span: whole };
                self.remember(anchor, &node, before);
                Ok(node)
            }
            Event::Alias(id) => match self.anchors.get(&id) {
                Some((node, weight)) => {
                    self.expanded = self.expanded.saturating_add(*weight);
                    if self.expanded > MAX_ALIAS_EXPANSION {
                        return Err(YamlError {
                            message: format!(
                                "aliases copy too much: this one takes the copies past {} MiB (nested aliases, a \
                                 \"billion laughs\"?)",
                                MAX_ALIAS_EXPANSION >> 20
                            ),
                            hint: "write the repeated parts out, or reuse them fewer times; an alias of an alias \
                                   multiplies the copies"
                                .to_string(),
                            span,
                            notes: Vec::new(),
                        });
                    }
                    self.produced = self.produced.saturating_add(*weight);
                    Ok(node.clone())
                }
                None => Err(YamlError {
                    message: "this alias refers to an unknown anchor".to_string(),
                    hint: "define the anchor (`&name`) before using it as an alias (`*name`)".to_string(),
                    span,
                    notes: Vec::new(),
                }),
            },
            _ => Err(unexpected(span)),
        }
    }

    /// Keeps an anchored node for its aliases; `before` is [`Self::produced`] before it.
    fn remember(&mut self, anchor: usize, node: &Node, before: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, (node.clone(), self.produced - before));
        }
    }
}

fn unexpected(span: Span) -> YamlError {
    YamlError {
        message: "invalid YAML: unexpected structure".to_string(),
        hint: "check the indentation here and above".to_string(),
        span,
        notes: Vec::new(),
    }
}

fn check_tag(tag: Option<&saphyr_parser::Tag>, span: Span) -> Result<(), YamlError> {
    match tag {
        Some(tag) if !tag.is_yaml_core_schema() => Err(unsupported_tag(&tag.to_string(), span)),
        _ => Ok(()),
    }
}

fn unsupported_tag(tag: &str, span: Span) -> YamlError {
    YamlError {
        message: format!("YAML tags such as `{tag}` are not supported in workflow files"),
        hint: "remove the tag; quote the value if it should be text".to_string(),
        span,
        notes: Vec::new(),
    }
}

fn complex_key(span: Span, mapping: bool) -> YamlError {
    if mapping {
        YamlError {
            message: "a mapping cannot be used as a key (is this an unquoted `{{ … }}` template?)".to_string(),
            hint: "quote a value that starts with `{{`, e.g. `for_each: \"{{ agents.survey.output.crates }}\"`"
                .to_string(),
            span,
            notes: Vec::new(),
        }
    } else {
        YamlError {
            message: "a list cannot be used as a key".to_string(),
            hint: "keys are plain names; quote the text if it starts with `[`".to_string(),
            span,
            notes: Vec::new(),
        }
    }
}

/// Resolves a plain scalar with the YAML 1.2 core schema.
fn resolve_plain(text: &str) -> Scalar {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        "true" | "True" | "TRUE" => return Scalar::Bool(true),
        "false" | "False" | "FALSE" => return Scalar::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Scalar::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        _ => {}
    }
    for (prefix, radix) in [("0o", 8), ("0x", 16)] {
        if let Some(digits) = text.strip_prefix(prefix)
            && !digits.is_empty()
            && digits.chars().all(|c| c.is_digit(radix))
            && let Ok(n) = i64::from_str_radix(digits, radix)
        {
            return Scalar::Int(n);
        }
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return match text.parse::<i64>() {
            Ok(n) => Scalar::Int(n),
            Err(_) => text.parse::<f64>().map(Scalar::Float).unwrap_or_else(|_| Scalar::Str(text.to_string())),
        };
    }
    if is_core_float(unsigned)
        && let Ok(f) = text.parse::<f64>()
    {
        return Scalar::Float(f);
    }
    Scalar::Str(text.to_string())
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`, the sign already removed.
fn is_core_float(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    let int_digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    i += int_digits;
    let mut frac_digits = 0;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits == 0 && frac_digits == 0 {
        return false;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'-' | b'+')) {
            i += 1;
        }
        let exp_digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        if exp_digits == 0 {
            return false;
        }
        i += exp_digits;
    }
    i == bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(text: &str) -> Node {
        parse(text).unwrap().0.unwrap()
    }

    #[test]
    fn resolves_core_schema_scalars() {
        assert_eq!(resolve_plain("12"), Scalar::Int(12));
        assert_eq!(resolve_plain("-3"), Scalar::Int(-3));
        assert_eq!(resolve_plain("0x1f"), Scalar::Int(31));
        assert_eq!(resolve_plain("2.5"), Scalar::Float(2.5));
        assert_eq!(resolve_plain("1e3"), Scalar::Float(1000.0));
        assert_eq!(resolve_plain("~"), Scalar::Null);
        assert_eq!(resolve_plain("yes"), Scalar::Str("yes".into()));
        assert_eq!(resolve_plain("inf"), Scalar::Str("inf".into()));
        assert_eq!(resolve_plain("1.2.3"), Scalar::Str("1.2.3".into()));
        assert_eq!(resolve_plain("30m"), Scalar::Str("30m".into()));
    }

    #[test]
    fn quoted_numbers_stay_text() {
        let node = root("a: '12'\n");
        assert_eq!(node.entry("a").unwrap().value.as_str(), Some("12"));
    }

    #[test]
    fn keeps_positions_and_order() {
        let node = root("b: 1\na:\n  - x\n  - y\n");
        let entries = node.entries().unwrap();
        assert_eq!(entries[0].key, "b");
        assert_eq!(entries[1].key, "a");
        assert_eq!(entries[1].key_span.start, Pos { line: 2, col: 0 });
        let (y, _) = node.find(&[Seg::key("a"), Seg::Index(1)]).unwrap();
        assert_eq!(y.span.start, Pos { line: 4, col: 4 });
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let (node, errors) = parse("a: 1\nb: 2\na: 3\n").unwrap();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].message, "duplicate key `a`");
        assert_eq!(errors[0].span.start.line, 3);
        let node = node.unwrap();
        assert_eq!(node.entries().unwrap().len(), 2);
    }

    #[test]
    fn aliases_copy_the_anchored_node() {
        let node = root("a: &x [1, 2]\nb: *x\n");
        assert_eq!(node.entry("a").unwrap().value.kind, node.entry("b").unwrap().value.kind);
    }

    #[test]
    fn syntax_errors_have_positions() {
        let errors = parse("a: [1, 2\nb: c\n").unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].span.start.line, 2);
    }

    #[test]
    fn empty_text_has_no_document() {
        assert!(parse("").unwrap().0.is_none());
        assert!(parse("# just a comment\n").unwrap().0.is_none());
    }

    #[test]
    fn two_documents_are_an_error() {
        assert!(parse("a: 1\n---\nb: 2\n").is_err());
    }
}
