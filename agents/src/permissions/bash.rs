//! Bash commands as permission rules see them: parsed with tree-sitter-bash into simple
//! commands (across `&&`, `||`, `;`, `|`, subshells, `$(…)`, backticks, `bash -c` and
//! here-docs fed to a shell), each normalised (leading assignments, wrappers such as
//! `env`, `timeout 5` or `sudo`, git's global options and absolute paths dropped), and
//! the `Bash(…)` specifier grammar (`git diff:*`, `npm run *`, exact commands).

use std::path::Path;

use regex::Regex;
use tree_sitter::{Node, Parser};

/// How deep `bash -c`, `eval` and here-docs may nest before a command counts as opaque.
const MAX_DEPTH: usize = 6;

/// A word of a command: its text after quote removal, or, for a word whose value is
/// only known when the shell runs (`$X`, `$(…)`), its text as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    pub text: String,
    pub dynamic: bool,
}

impl Word {
    fn fixed(text: impl Into<String>) -> Word {
        Word { text: text.into(), dynamic: false }
    }
}

/// One simple command of a command line, after normalisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Command {
        words: Vec<Word>,
        /// Files named by redirections (`< .env`, `> out`).
        redirects: Vec<Word>,
    },
    /// A command the parser could not follow: it matches every deny rule for its first
    /// word (every deny rule when even that is unknown) and no allow rule.
    Opaque(Option<String>),
}

impl Part {
    /// The command as rules see it: words joined by single spaces.
    pub fn text(&self) -> String {
        match self {
            Part::Command { words, .. } => words.iter().map(|w| w.text.as_str()).collect::<Vec<_>>().join(" "),
            Part::Opaque(Some(first)) => format!("{first} …"),
            Part::Opaque(None) => "…".to_string(),
        }
    }

    /// The arguments that could name files: every fixed word after the command name that
    /// is not an option, and the redirection targets.
    pub fn path_args(&self) -> Vec<&str> {
        match self {
            Part::Command { words, redirects } => words
                .iter()
                .skip(1)
                .chain(redirects.iter())
                .filter(|w| !w.dynamic && !w.text.is_empty())
                .map(|w| {
                    w.text.strip_prefix('-').and_then(|o| o.split_once('=').map(|(_, v)| v)).unwrap_or(w.text.as_str())
                })
                .filter(|t| !t.starts_with('-') && !t.is_empty())
                .collect(),
            Part::Opaque(_) => Vec::new(),
        }
    }
}

/// Splits `script` into its normalised simple commands. An empty script has none.
pub(crate) fn parse(script: &str) -> Vec<Part> {
    let mut out = Vec::new();
    parse_into(script, 0, &mut out);
    out
}

fn parse_into(script: &str, depth: usize, out: &mut Vec<Part>) {
    if depth > MAX_DEPTH {
        out.push(Part::Opaque(None));
        return;
    }
    let mut parser = Parser::new();
    let tree = match parser.set_language(&tree_sitter_bash::LANGUAGE.into()) {
        Ok(()) => parser.parse(script, None),
        Err(_) => None,
    };
    let Some(tree) = tree else {
        out.push(Part::Opaque(first_token(script)));
        return;
    };
    let root = tree.root_node();
    let mut found = Vec::new();
    walk(root, script, depth, None, &mut found);
    if root.has_error() {
        // Not understood: every command found and the line's first word only count
        // against deny rules.
        for part in found {
            out.push(match part {
                Part::Command { words, .. } => {
                    Part::Opaque(words.first().filter(|w| !w.dynamic).map(|w| w.text.clone()))
                }
                opaque => opaque,
            });
        }
        out.push(Part::Opaque(first_token(script)));
        return;
    }
    out.extend(found);
}

/// The first word of a line the parser gave up on, normalised as far as plain words go.
fn first_token(script: &str) -> Option<String> {
    let words: Vec<Word> =
        script.split_whitespace().map(|w| Word::fixed(w.trim_matches(['\'', '"', '(', '{']))).collect();
    match normalize(words) {
        Normalized::Words(words) => words.first().filter(|w| !w.text.is_empty()).map(|w| w.text.clone()),
        _ => None,
    }
}

/// What a redirected statement gives the command in its body: the text a here-doc or
/// here-string feeds to stdin, and the files its redirections name.
#[derive(Default)]
struct Feed {
    stdin: Option<String>,
    files: Vec<Word>,
}

fn walk(node: Node<'_>, src: &str, depth: usize, feed: Option<&Feed>, out: &mut Vec<Part>) {
    match node.kind() {
        "command" => command(node, src, depth, feed, out),
        "redirected_statement" => {
            let own = redirections(node, src);
            let mut cursor = node.walk();
            for child in node.named_children(&mut cursor) {
                walk(child, src, depth, Some(&own), out);
            }
            return;
        }
        _ => {}
    }
    let mut cursor = node.walk();
    for child in node.named_children(&mut cursor) {
        walk(child, src, depth, None, out);
    }
}

fn redirections(node: Node<'_>, src: &str) -> Feed {
    let mut feed = Feed::default();
    let mut cursor = node.walk();
    for redirect in node.children_by_field_name("redirect", &mut cursor) {
        match redirect.kind() {
            "heredoc_redirect" => {
                let mut c = redirect.walk();
                let body = redirect.named_children(&mut c).find(|n| n.kind() == "heredoc_body");
                feed.stdin = Some(body.map(|b| text(b, src).to_string()).unwrap_or_default());
            }
            "herestring_redirect" => feed.stdin = herestring(redirect, src),
            "file_redirect" => {
                let mut c = redirect.walk();
                feed.files.extend(redirect.children_by_field_name("destination", &mut c).map(|d| word(d, src)));
            }
            _ => {}
        }
    }
    feed
}

fn herestring(node: Node<'_>, src: &str) -> Option<String> {
    let mut cursor = node.walk();
    let arg = node.named_children(&mut cursor).find(|n| n.kind() != "file_descriptor")?;
    let w = word(arg, src);
    Some(if w.dynamic { "\u{0}".to_string() } else { w.text })
}

fn text<'a>(node: Node<'_>, src: &'a str) -> &'a str {
    src.get(node.byte_range()).unwrap_or_default()
}

/// One simple command: its words, normalised, with `bash -c`, `eval`, shells reading a
/// here-doc and `find -exec` followed into the commands they run.
fn command(node: Node<'_>, src: &str, depth: usize, feed: Option<&Feed>, out: &mut Vec<Part>) {
    let mut words = Vec::new();
    if let Some(name) = node.child_by_field_name("name") {
        words.push(word(name, src));
    }
    let mut cursor = node.walk();
    words.extend(node.children_by_field_name("argument", &mut cursor).map(|a| word(a, src)));
    let mut redirects: Vec<Word> = feed.map(|f| f.files.clone()).unwrap_or_default();
    let mut own_stdin = None;
    let mut cursor = node.walk();
    for redirect in node.children_by_field_name("redirect", &mut cursor) {
        match redirect.kind() {
            "file_redirect" => {
                let mut c = redirect.walk();
                redirects.extend(redirect.children_by_field_name("destination", &mut c).map(|d| word(d, src)));
            }
            "herestring_redirect" => own_stdin = herestring(redirect, src),
            _ => {}
        }
    }
    let stdin = own_stdin.as_deref().or(feed.and_then(|f| f.stdin.as_deref()));
    if words.is_empty() {
        return;
    }
    let words = match normalize(words) {
        Normalized::Words(words) => words,
        Normalized::Opaque(first) => {
            out.push(Part::Opaque(first));
            return;
        }
        Normalized::Script(script) => {
            parse_into(&script, depth + 1, out);
            return;
        }
    };
    let name = words.first().map(|w| w.text.as_str()).unwrap_or_default();
    if SHELLS.contains(&name) && words.iter().skip(1).all(|w| w.text.starts_with('-')) {
        // A shell reading its commands from stdin: follow a here-doc, else give up.
        match stdin {
            Some(script) if !script.contains('\u{0}') => parse_into(script, depth + 1, out),
            _ => out.push(Part::Opaque(None)),
        }
        return;
    }
    if name == "find" {
        find_exec(&words, depth, out);
    }
    out.push(Part::Command { words, redirects });
}

/// `find … -exec cmd {} ;` runs `cmd`: check it as a command of its own.
fn find_exec(words: &[Word], depth: usize, out: &mut Vec<Part>) {
    let mut i = 0;
    while i < words.len() {
        if matches!(words[i].text.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") {
            let inner: Vec<Word> =
                words[i + 1..].iter().take_while(|w| !matches!(w.text.as_str(), ";" | "+")).cloned().collect();
            i += inner.len() + 1;
            if depth >= MAX_DEPTH {
                out.push(Part::Opaque(None));
            } else if !inner.is_empty() {
                match normalize(inner) {
                    Normalized::Words(words) => out.push(Part::Command { words, redirects: Vec::new() }),
                    Normalized::Opaque(first) => out.push(Part::Opaque(first)),
                    Normalized::Script(script) => parse_into(&script, depth + 1, out),
                }
            }
        }
        i += 1;
    }
}

/// A word node's value.
fn word(node: Node<'_>, src: &str) -> Word {
    let raw = text(node, src);
    match node.kind() {
        "command_name" => match node.named_child(0) {
            Some(inner) => word(inner, src),
            None => Word::fixed(raw),
        },
        "word" | "number" => {
            if raw.contains(['*', '?', '[']) && !raw.contains('\\') {
                // Globs expand to file names only the shell knows.
                Word { text: raw.to_string(), dynamic: raw.chars().any(|c| matches!(c, '?' | '[')) }
            } else {
                Word::fixed(unescape(raw))
            }
        }
        "raw_string" => Word::fixed(raw.get(1..raw.len().saturating_sub(1)).unwrap_or_default()),
        "ansi_c_string" if !raw.contains('\\') => {
            Word::fixed(raw.get(2..raw.len().saturating_sub(1)).unwrap_or_default())
        }
        "string" => {
            let mut cursor = node.walk();
            if node.named_children(&mut cursor).all(|c| c.kind() == "string_content") {
                Word::fixed(unescape_double(raw.get(1..raw.len().saturating_sub(1)).unwrap_or_default()))
            } else {
                Word { text: raw.to_string(), dynamic: true }
            }
        }
        "concatenation" => {
            let mut cursor = node.walk();
            let parts: Vec<Word> = node.named_children(&mut cursor).map(|c| word(c, src)).collect();
            Word {
                text: parts.iter().map(|w| w.text.as_str()).collect(),
                dynamic: parts.iter().any(|w| w.dynamic) || parts.is_empty(),
            }
        }
        _ => Word { text: raw.to_string(), dynamic: true },
    }
}

fn unescape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next()
                && n != '\n'
            {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn unescape_double(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('\\', Some(&n)) if matches!(n, '"' | '\\' | '$' | '`') => {
                out.push(n);
                chars.next();
            }
            ('\\', Some('\n')) => {
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

const SHELLS: &[&str] = &["bash", "sh", "zsh", "dash", "ksh", "ash"];

enum Normalized {
    Words(Vec<Word>),
    /// The command runs this script (`bash -c '…'`, `eval …`).
    Script(String),
    Opaque(Option<String>),
}

/// Drops what does not change which program runs and how rules read it.
fn normalize(mut words: Vec<Word>) -> Normalized {
    loop {
        // Leading `VAR=value` assignments.
        let assignments = words.iter().take_while(|w| is_assignment(&w.text)).count();
        if assignments == words.len() {
            return Normalized::Words(words);
        }
        words.drain(..assignments);
        let first = &words[0];
        if first.dynamic {
            return Normalized::Opaque(None);
        }
        if first.text.starts_with('/') {
            let name = Path::new(&first.text).file_name().map(|n| n.to_string_lossy().into_owned());
            if let Some(name) = name {
                words[0] = Word::fixed(name);
            }
        }
        let name = words[0].text.clone();
        let skip = match name.as_str() {
            "env" => options(&words, &["-u", "--unset", "-C", "--chdir"], true),
            "command" | "builtin" | "nohup" => options(&words, &[], false),
            "exec" => options(&words, &["-a"], false),
            "nice" => options(&words, &["-n", "--adjustment"], false),
            "time" => options(&words, &["-f", "--format", "-o", "--output"], false),
            "stdbuf" => options(&words, &["-i", "-o", "-e", "--input", "--output", "--error"], false),
            "timeout" => options(&words, &["-s", "--signal", "-k", "--kill-after"], false).map(|n| n + 1),
            "sudo" | "doas" => options(
                &words,
                &["-u", "--user", "-g", "--group", "-C", "-D", "--chdir", "-h", "-p", "-r", "-t", "-U", "-T"],
                true,
            ),
            "xargs" => options(
                &words,
                &[
                    "-I",
                    "-n",
                    "-P",
                    "-L",
                    "-d",
                    "-E",
                    "-s",
                    "-a",
                    "--max-args",
                    "--max-procs",
                    "--delimiter",
                    "--arg-file",
                ],
                false,
            ),
            "eval" => return script_of(&words[1..]),
            s if SHELLS.contains(&s) => match shell_script(&words) {
                Some(script) => return script,
                None => return Normalized::Words(words),
            },
            "git" => {
                let keep = git_global_options(&words);
                words.drain(1..1 + keep);
                return Normalized::Words(words);
            }
            _ => return Normalized::Words(words),
        };
        match skip {
            Some(n) if n < words.len() => {
                words.drain(..n);
            }
            // A bare wrapper (`env`, `time`) runs nothing else.
            _ => return Normalized::Words(words),
        }
    }
}

fn is_assignment(word: &str) -> bool {
    match word.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '+' || c == '[' || c == ']')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        }
        None => false,
    }
}

/// How many words a wrapper takes before the command it runs: its name, its options
/// (those in `with_arg` take the next word unless written `--opt=value`), `--`, and
/// with `assignments`, `NAME=value` words. `None` when the wrapper's arguments are
/// dynamic, so the command it runs is unknown.
fn options(words: &[Word], with_arg: &[&str], assignments: bool) -> Option<usize> {
    let mut i = 1;
    while let Some(w) = words.get(i) {
        if w.dynamic {
            return None;
        }
        let t = w.text.as_str();
        if t == "--" {
            return Some(i + 1);
        }
        if t.starts_with('-') && t.len() > 1 {
            let takes = with_arg.contains(&t);
            i += if takes { 2 } else { 1 };
            continue;
        }
        if assignments && is_assignment(t) {
            i += 1;
            continue;
        }
        break;
    }
    Some(i)
}

/// `bash -c 'script'` (options may come first, `-c` may be in a cluster like `-lc`).
/// `None` when the shell runs a script file, which rules see as `bash file`.
fn shell_script(words: &[Word]) -> Option<Normalized> {
    let mut i = 1;
    while let Some(w) = words.get(i) {
        if w.dynamic {
            return Some(Normalized::Opaque(None));
        }
        let t = w.text.as_str();
        if t.starts_with('-') && !t.starts_with("--") && t.contains('c') {
            return Some(match words.get(i + 1) {
                Some(script) if !script.dynamic => Normalized::Script(script.text.clone()),
                _ => Normalized::Opaque(None),
            });
        }
        if t.starts_with('-') || t.starts_with('+') {
            // `-o pipefail` takes an argument.
            i += if matches!(t, "-o" | "+o" | "-O" | "+O") { 2 } else { 1 };
            continue;
        }
        return None;
    }
    None
}

fn script_of(words: &[Word]) -> Normalized {
    if words.iter().any(|w| w.dynamic) {
        return Normalized::Opaque(None);
    }
    Normalized::Script(words.iter().map(|w| w.text.as_str()).collect::<Vec<_>>().join(" "))
}

/// How many words after `git` are global options.
fn git_global_options(words: &[Word]) -> usize {
    let mut i = 1;
    while let Some(w) = words.get(i) {
        let t = w.text.as_str();
        if !t.starts_with('-') || t == "--" {
            break;
        }
        let takes =
            matches!(t, "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix" | "--config-env");
        i += if takes { 2 } else { 1 };
    }
    (i - 1).min(words.len().saturating_sub(1))
}

/// A `Bash(…)` specifier.
#[derive(Debug, Clone)]
pub(crate) struct CommandPattern {
    kind: Kind,
    /// The literal words before the first wildcard.
    words: Vec<String>,
}

#[derive(Debug, Clone)]
enum Kind {
    /// `git diff:*`: the prefix alone or followed by arguments.
    Prefix(String),
    /// `npm run *`, `* --version`: `*` is any run of characters.
    Wildcard(Regex),
    /// No wildcard: exactly this command.
    Exact(String),
}

impl CommandPattern {
    pub fn parse(spec: &str) -> Result<CommandPattern, String> {
        let spec = spec.split_whitespace().collect::<Vec<_>>().join(" ");
        if spec.is_empty() {
            return Err("the command is empty; write `Bash` for every command".into());
        }
        let kind = match spec.strip_suffix(":*") {
            Some(prefix) if !prefix.contains('*') => Kind::Prefix(prefix.trim_end().to_string()),
            Some(prefix) => Kind::Wildcard(wildcard(&format!("{} *", prefix.trim_end()))?),
            None if spec.contains('*') => Kind::Wildcard(wildcard(&spec)?),
            None => Kind::Exact(spec.clone()),
        };
        let literal = match &kind {
            Kind::Prefix(p) | Kind::Exact(p) => p.as_str(),
            Kind::Wildcard(_) => spec.split('*').next().unwrap_or_default(),
        };
        let mut words: Vec<String> = literal.split(' ').map(str::to_string).collect();
        // A word cut by a wildcard is not literal.
        if matches!(kind, Kind::Wildcard(_)) && !literal.ends_with(' ') {
            words.pop();
        }
        words.retain(|w| !w.is_empty());
        Ok(CommandPattern { kind, words })
    }

    /// Whether the pattern covers one simple command. With `conservative` (deny and ask
    /// rules), a command with words only known at run time matches when they could make
    /// it match, and an opaque command matches when its first word does.
    pub fn matches(&self, part: &Part, conservative: bool) -> bool {
        let words = match part {
            Part::Command { words, .. } => words,
            Part::Opaque(first) => {
                return conservative
                    && match (first, self.words.first()) {
                        (Some(first), Some(word)) => first == word,
                        _ => true,
                    };
            }
        };
        let text = part.text();
        let hit = match &self.kind {
            Kind::Prefix(p) => text == *p || text.strip_prefix(p.as_str()).is_some_and(|rest| rest.starts_with(' ')),
            Kind::Wildcard(re) => re.is_match(&text),
            Kind::Exact(e) => text == *e,
        };
        hit || (conservative && words.iter().any(|w| w.dynamic) && self.could_match(words))
    }

    /// For a command with run-time words: whether its fixed words agree with the
    /// pattern's literal words up to the first run-time word.
    fn could_match(&self, words: &[Word]) -> bool {
        for (i, literal) in self.words.iter().enumerate() {
            match words.get(i) {
                None => return false,
                Some(w) if w.dynamic => return true,
                Some(w) if w.text != *literal => return false,
                Some(_) => {}
            }
        }
        true
    }
}

fn wildcard(spec: &str) -> Result<Regex, String> {
    let (body, optional_tail) = match spec.strip_suffix(" *") {
        Some(body) if !body.contains('*') => (body, true),
        _ => (spec, false),
    };
    let mut re = String::from("^(?s)");
    re.push_str(&body.split('*').map(regex::escape).collect::<Vec<_>>().join(".*"));
    if optional_tail {
        re.push_str("(?: .*)?");
    }
    re.push('$');
    Regex::new(&re).map_err(|e| format!("the pattern does not compile: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(script: &str) -> Vec<String> {
        parse(script).iter().map(Part::text).collect()
    }

    #[test]
    fn splits_and_normalises() {
        assert_eq!(texts("git diff && rm -rf x"), ["git diff", "rm -rf x"]);
        assert_eq!(texts("a; b | c || d & e"), ["a", "b", "c", "d", "e"]);
        assert_eq!(texts("echo 'a; b' \"c && d\""), ["echo a; b c && d"]);
        assert_eq!(texts("git  -C . -c a=b --git-dir=.git push"), ["git push"]);
        assert_eq!(texts("/usr/bin/git push"), ["git push"]);
        assert_eq!(texts("VAR=x timeout -s KILL 5 nice -n 3 command git push"), ["git push"]);
        assert_eq!(texts("sudo -u root env A=1 xargs -n 1 git push"), ["git push"]);
        assert_eq!(texts("bash -c 'git push && ls'"), ["git push", "ls"]);
        assert_eq!(texts("echo $(git push) `rm x`"), ["echo $(git push) `rm x`", "git push", "rm x"]);
        assert_eq!(texts("(cd x && git push)"), ["cd x", "git push"]);
        assert_eq!(texts("bash <<EOF\ngit push\nEOF\n"), ["git push"]);
        assert_eq!(texts("find . -name x -exec rm {} \\;"), ["rm {}", "find . -name x -exec rm {} ;"]);
    }

    #[test]
    fn opaque_commands() {
        assert_eq!(parse("echo 'unbalanced").last(), Some(&Part::Opaque(Some("echo".into()))));
        assert_eq!(parse("$GIT push"), [Part::Opaque(None)]);
        assert_eq!(parse("curl x | sh").last(), Some(&Part::Opaque(None)));
        assert_eq!(parse("bash -c \"$CMD\""), [Part::Opaque(None)]);
    }

    #[test]
    fn patterns() {
        let m = |p: &str, c: &str| parse(c).iter().all(|part| CommandPattern::parse(p).unwrap().matches(part, false));
        assert!(m("git diff:*", "git diff --stat"));
        assert!(m("git diff:*", "git diff"));
        assert!(!m("git diff:*", "git difftool"));
        assert!(m("ls *", "ls -la"));
        assert!(m("ls *", "ls"));
        assert!(!m("ls *", "lsof"));
        assert!(m("ls*", "lsof"));
        assert!(m("* --version", "node --version"));
        assert!(m("cargo * --release", "cargo build --release"));
        assert!(m("npm run build", "npm  run build"));
        assert!(!m("npm run build", "npm run build2"));
    }
}
