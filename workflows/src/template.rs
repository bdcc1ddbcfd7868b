//! `{{ }}` templates (minijinja): compiling, finding the names a template reads, and
//! rendering with strict undefined behaviour.
//!
//! A template sees `inputs` (the run's inputs), the fan-out item under its `as:` name
//! (default `item`), and `agents`: `agents.<id>.text` and `agents.<id>.output` for an
//! earlier agent, or a list of `{ id, item, text, output }` for a fan-out agent.
//! Rendering never prints an empty string for a missing name: an undefined value is an
//! error. Prompts are rendered as text: no HTML escaping, the trailing newline kept.

use std::collections::HashSet;
use std::sync::OnceLock;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;

/// Names a template reads: the root variable and the attribute chain after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    /// `["agents", "survey", "output", "crates"]`.
    pub parts: Vec<String>,
    /// Byte offset of the reference in the template text, when it could be found.
    pub offset: Option<usize>,
    /// Byte length of the reference as written.
    pub len: usize,
}

impl Reference {
    pub fn root(&self) -> &str {
        self.parts.first().map(String::as_str).unwrap_or("")
    }

    #[cfg(test)]
    pub fn dotted(&self) -> String {
        self.parts.join(".")
    }
}

/// A template that does not compile or render, with the place in the template text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TemplateError {
    pub message: String,
    /// Byte range in the template text.
    pub offset: usize,
    pub len: usize,
}

/// The environment every template is compiled and rendered in.
pub(crate) fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_debug(true);
    env.add_filter("flatten", flatten);
    if let Ok(syntax) = SyntaxConfig::builder().keep_trailing_newline(true).build() {
        env.set_syntax(syntax);
    }
    env
}

/// `flatten`: a list of lists as one list (one level; items that are not lists stay).
fn flatten(value: minijinja::Value) -> Result<minijinja::Value, minijinja::Error> {
    let mut out = Vec::new();
    for item in value.try_iter()? {
        match item.try_iter() {
            Ok(inner) if item.kind() == minijinja::value::ValueKind::Seq => out.extend(inner),
            _ => out.push(item),
        }
    }
    Ok(minijinja::Value::from(out))
}

fn template_error(err: &minijinja::Error, source: &str) -> TemplateError {
    let (offset, len) = match (err.range(), err.line()) {
        (Some(range), _) if range.start <= source.len() => (range.start, range.len().max(1)),
        (_, Some(line)) => {
            let offset = source.split_inclusive('\n').take(line.saturating_sub(1)).map(str::len).sum();
            (offset, 1)
        }
        _ => (0, 1),
    };
    let detail = err.detail().map(|d| format!(": {d}")).unwrap_or_default();
    let message = match err.kind() {
        minijinja::ErrorKind::UndefinedError => {
            let snippet = source.get(offset..offset + len).unwrap_or("").trim();
            if snippet.is_empty() {
                "a value in the template is undefined".to_string()
            } else {
                format!("`{snippet}` is undefined")
            }
        }
        kind => format!("{kind}{detail}"),
    };
    TemplateError { message, offset, len }
}

/// The globals of the environment (`range`, `dict`, …): not variables to check.
/// The names minijinja defines itself (`range`, `dict`, ...), computed once.
fn globals() -> &'static HashSet<String> {
    static GLOBALS: OnceLock<HashSet<String>> = OnceLock::new();
    GLOBALS.get_or_init(|| shared().globals().map(|(name, _)| name.to_string()).collect())
}

/// One environment for every template: making one registers every built-in filter and
/// test, which costs more than compiling a short template.
fn shared() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(environment)
}

/// Compiles `source` and lists the undeclared names it reads, in order of appearance.
pub(crate) fn references(source: &str) -> Result<Vec<Reference>, TemplateError> {
    if is_plain_text(source) {
        return Ok(Vec::new());
    }
    let env = shared();
    let template = env.template_from_str(source).map_err(|e| template_error(&e, source))?;
    Ok(located(source, template.undeclared_variables(true)))
}

/// Whether `source` has no template syntax at all (no `{{`, `{%` or `{#`), so it
/// reads nothing and cannot fail to compile: most prompts, spared a compile.
fn is_plain_text(source: &str) -> bool {
    !source.as_bytes().windows(2).any(|w| w[0] == b'{' && matches!(w[1], b'{' | b'%' | b'#'))
}

/// Compiles the expression `expr` and lists the names it reads.
pub(crate) fn expression_references(expr: &str) -> Result<Vec<Reference>, TemplateError> {
    let env = shared();
    let expression = env.compile_expression(expr).map_err(|e| template_error(&e, expr))?;
    Ok(located(expr, expression.undeclared_variables(true)))
}

fn located(source: &str, names: HashSet<String>) -> Vec<Reference> {
    let globals = globals();
    let mut refs: Vec<Reference> = names
        .into_iter()
        .map(|dotted| {
            let parts: Vec<String> = dotted.split('.').map(str::to_string).collect();
            let (offset, len) = match find_word(source, &dotted) {
                Some(offset) => (Some(offset), dotted.len()),
                None => (find_word(source, &parts[0]), parts[0].len()),
            };
            Reference { parts, offset, len }
        })
        .filter(|r| !globals.contains(r.root()))
        .collect();
    refs.sort_by(|a, b| {
        a.offset.unwrap_or(usize::MAX).cmp(&b.offset.unwrap_or(usize::MAX)).then(a.parts.cmp(&b.parts))
    });
    refs
}

/// The first occurrence of `word` in `text` that is not part of a longer name.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let is_name = |c: char| c.is_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(found) = text[from..].find(word) {
        let start = from + found;
        let end = start + word.len();
        let before_ok = !text[..start].ends_with(|c: char| is_name(c) || c == '.');
        let after_ok = !text[end..].starts_with(is_name);
        if before_ok && after_ok {
            return Some(start);
        }
        from = start + word.len().max(1);
    }
    None
}

/// For `for_each`: the expression inside a string that is exactly one `{{ … }}`, with
/// its byte offset in that string.
pub(crate) fn single_expression(text: &str) -> Option<(&str, usize)> {
    let trimmed_start = text.len() - text.trim_start().len();
    let inner = text.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    if inner.contains("{{") || inner.contains("}}") || inner.contains("{%") {
        return None;
    }
    let expr = inner.trim();
    if expr.is_empty() {
        return None;
    }
    let offset = trimmed_start + 2 + (inner.len() - inner.trim_start().len());
    Some((expr, offset))
}

/// Filter names for "did you mean" (existence is asked of minijinja itself).
pub(crate) const KNOWN_FILTERS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "count",
    "default",
    "dictsort",
    "escape",
    "first",
    "float",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
];

/// The filters a template applies (`x | name`, `{% filter name %}`), with the byte
/// offset of each name. Text outside tags, comments, `{% raw %}` blocks and string
/// literals is skipped.
pub(crate) fn filters(source: &str) -> Vec<(String, usize)> {
    let bytes = source.as_bytes();
    let ident_at = |mut i: usize| -> Option<(String, usize)> {
        while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        let start = i;
        while bytes.get(i).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_') {
            i += 1;
        }
        let name = source.get(start..i)?;
        (name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')).then(|| (name.to_string(), start))
    };
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(found) = source.get(i..).and_then(|rest| rest.find('{')) {
        let open = i + found;
        let close: &str = match bytes.get(open + 1) {
            Some(b'{') => "}}",
            Some(b'%') => "%}",
            Some(b'#') => {
                i = source[open..].find("#}").map_or(bytes.len(), |end| open + end + 2);
                continue;
            }
            _ => {
                i = open + 1;
                continue;
            }
        };
        let mut j = open + 2;
        if close == "%}" {
            let word = ident_at(j + usize::from(matches!(bytes.get(j), Some(b'-' | b'+' | b'~'))));
            match word.as_ref().map(|(w, _)| w.as_str()) {
                Some("raw") => {
                    i = source[j..].find("endraw").map_or(bytes.len(), |end| j + end + 6);
                    continue;
                }
                Some("filter") => {
                    if let Some((_, at)) = &word
                        && let Some(name) = ident_at(at + 6)
                    {
                        out.push(name);
                    }
                }
                _ => {}
            }
        }
        let mut quote: Option<u8> = None;
        while j < bytes.len() {
            let b = bytes[j];
            if let Some(q) = quote {
                if b == b'\\' {
                    j += 1;
                } else if b == q {
                    quote = None;
                }
            } else if b == b'"' || b == b'\'' {
                quote = Some(b);
            } else if b == b'|' {
                out.extend(ident_at(j + 1));
            } else if bytes[j..].starts_with(close.as_bytes()) {
                j += 1;
                break;
            }
            j += 1;
        }
        i = j + 1;
    }
    out
}

/// Whether minijinja knows the filter `name` (an identifier).
pub(crate) fn filter_exists(name: &str) -> bool {
    let env = shared();
    match env.render_str(&format!("{{{{ none | {name} }}}}"), ()) {
        Ok(_) => true,
        Err(e) => e.kind() != minijinja::ErrorKind::UnknownFilter,
    }
}

/// Renders `source` with `context` (a JSON object of variables).
pub(crate) fn render(source: &str, context: &Value) -> Result<String, TemplateError> {
    let env = shared();
    let template = env.template_from_str(source).map_err(|e| template_error(&e, source))?;
    template.render(Serde(context)).map_err(|e| template_error(&e, source))
}

/// Evaluates the expression `expr` with `context` and converts the result to JSON.
pub(crate) fn eval(expr: &str, context: &Value) -> Result<Value, TemplateError> {
    let env = shared();
    let expression = env.compile_expression(expr).map_err(|e| template_error(&e, expr))?;
    let value = expression.eval(Serde(context)).map_err(|e| template_error(&e, expr))?;
    if value.is_undefined() {
        return Err(TemplateError { message: format!("`{expr}` is undefined"), offset: 0, len: expr.len() });
    }
    serde_json::to_value(&value).map_err(|e| TemplateError {
        message: format!("`{expr}` did not produce plain data: {e}"),
        offset: 0,
        len: expr.len(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn plain_text_reads_nothing_and_syntax_is_still_checked() {
        assert!(is_plain_text("Review {the} code, 100% of it # all"));
        assert!(references("Review {the} code.").unwrap().is_empty());
        assert!(!is_plain_text("a {# note #}"));
        assert!(references("Broken {{ inputs.x").is_err());
        assert!(references("Broken {% if %}").is_err());
    }

    #[test]
    fn filters_are_found_in_tags_only() {
        let source = "a | b {{ x | upper | replace('|', \"| q\") }} {# y | hidden #} {%- filter lower %}z{% endfilter %}\
                      {% raw %}{{ w | inraw }}{% endraw %} {{ é | trim }}";
        let found = filters(source);
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["upper", "replace", "lower", "trim"]);
        let (name, at) = &found[0];
        assert_eq!(&source[*at..*at + name.len()], "upper");
        assert!(filter_exists("upper") && filter_exists("replace"));
        assert!(!filter_exists("nosuchfilter"));
    }

    fn dotted(source: &str) -> Vec<String> {
        references(source).unwrap().iter().map(Reference::dotted).collect()
    }

    #[test]
    fn finds_references_in_order() {
        assert_eq!(
            dotted("Fix {{ crate }} for {{ inputs.target }}; {{ agents.survey.output.crates | join(', ') }}"),
            ["crate", "inputs.target", "agents.survey.output.crates"]
        );
        assert_eq!(
            dotted("{% for c in agents.survey.output.crates %}{{ c }}{{ loop.index }}{% endfor %}"),
            ["agents.survey.output.crates"]
        );
        assert_eq!(dotted("{{ range(3) | list }} {{ agents['my-agent'].text }}"), ["agents"]);
    }

    #[test]
    fn reference_offsets_skip_longer_names() {
        let refs = references("{{ items }} {{ item }}").unwrap();
        let item = refs.iter().find(|r| r.root() == "item").unwrap();
        assert_eq!(item.offset, Some(15));
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let err = references("Hello {{ name ").unwrap_err();
        assert!(err.message.starts_with("syntax error"), "{}", err.message);
        let err = references("line\n{% if x %}").unwrap_err();
        assert!(err.offset >= 5, "{err:?}");
    }

    #[test]
    fn renders_strictly() {
        let ctx = json!({ "inputs": { "target": "core" }, "item": "a" });
        assert_eq!(render("{{ inputs.target }}/{{ item }}\n", &ctx).unwrap(), "core/a\n");
        let err = render("x {{ inputs.nope }}", &ctx).unwrap_err();
        assert_eq!(err.message, "`inputs.nope` is undefined");
        assert!(render("{{ missing }}", &ctx).is_err());
        assert_eq!(render("<b>{{ item }}</b> & co", &json!({ "item": "<i>" })).unwrap(), "<b><i></b> & co");
    }

    #[test]
    fn evaluates_expressions_to_json() {
        let ctx = json!({ "agents": { "survey": { "output": { "crates": ["a", "b"] } } } });
        assert_eq!(eval("agents.survey.output.crates", &ctx).unwrap(), json!(["a", "b"]));
        assert!(eval("agents.survey.output.nope", &ctx).is_err());
    }

    #[test]
    fn single_expression_strips_braces() {
        assert_eq!(single_expression(" {{ agents.x.output.y }} "), Some(("agents.x.output.y", 4)));
        assert_eq!(single_expression("a {{ b }}"), None);
        assert_eq!(single_expression("{{ a }} {{ b }}"), None);
        assert_eq!(single_expression("{{ }}"), None);
    }
}
