//! A conservative classifier for `Bash` commands: `is_read_only` says yes only when
//! every simple command of the line is a known read-only program used in a known
//! read-only way. Anything the lexer does not fully understand is "not read-only".
//!
//! The lexer follows bash's quoting closely enough to find command boundaries:
//! single quotes are literal, double quotes allow `$` expansions (which are rejected
//! when they substitute commands), a backslash escapes the next character. It rejects
//! outright: command and process substitution (`$(`, backticks, `<(`, `>(`),
//! arithmetic (`$((`, `$[`), `${...}`, `$'...'`, `$"..."`, any unquoted `>` except an
//! exact `2>&1`, any unquoted `<`, parentheses (subshells), unterminated quotes and the
//! word `sudo`.

/// A word of a simple command, unquoted, with what the shell would still do to it.
#[derive(Debug, Default)]
struct Word {
    text: String,
    /// An unquoted `*`, `?`, `[`, `{` or `}`: the shell may expand it into other words
    /// (file names, or brace alternatives), which could be options.
    globby: bool,
    /// A `$` expansion (outside single quotes): the value comes from the environment.
    expands: bool,
    /// Any part of it was quoted or escaped.
    quoted: bool,
}

impl Word {
    fn is_empty(&self) -> bool {
        self.text.is_empty() && !self.quoted && !self.globby && !self.expands
    }
}

/// Splits `command` into simple commands (lists of words) at `;`, `&`, `&&`, `|`,
/// `||`, `|&` and newlines. `None` means "something the classifier does not accept".
fn split(command: &str) -> Option<Vec<Vec<Word>>> {
    let chars: Vec<char> = command.chars().collect();
    let mut parts: Vec<Vec<Word>> = Vec::new();
    let mut words: Vec<Word> = Vec::new();
    let mut word = Word::default();
    let mut i = 0;

    fn end_word(words: &mut Vec<Word>, word: &mut Word) {
        let w = std::mem::take(word);
        if !w.is_empty() {
            words.push(w);
        }
    }
    fn end_part(parts: &mut Vec<Vec<Word>>, words: &mut Vec<Word>, word: &mut Word) {
        end_word(words, word);
        let ws = std::mem::take(words);
        if !ws.is_empty() {
            parts.push(ws);
        }
    }

    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            ' ' | '\t' => {
                end_word(&mut words, &mut word);
                i += 1;
            }
            '\n' | ';' => {
                end_part(&mut parts, &mut words, &mut word);
                i += 1;
            }
            '&' => {
                // `&&` or a lone `&` (background): both end the simple command.
                // `&>` is an output redirection.
                if next == Some('>') {
                    return None;
                }
                end_part(&mut parts, &mut words, &mut word);
                i += if next == Some('&') { 2 } else { 1 };
            }
            '|' => {
                end_part(&mut parts, &mut words, &mut word);
                i += if next == Some('|') || next == Some('&') { 2 } else { 1 };
            }
            '>' => {
                // Only an exact, unquoted `2>&1` standing as its own word is allowed.
                let is_dup = word.text == "2"
                    && !word.quoted
                    && !word.globby
                    && !word.expands
                    && chars.get(i + 1) == Some(&'&')
                    && chars.get(i + 2) == Some(&'1')
                    && chars.get(i + 3).is_none_or(|c| matches!(c, ' ' | '\t' | '\n' | ';' | '&' | '|'));
                if !is_dup {
                    return None;
                }
                // Was the `2` its own word? It must follow a word boundary.
                let before = if i >= 2 { chars.get(i - 2).copied() } else { None };
                if before.is_some_and(|c| !matches!(c, ' ' | '\t' | '\n' | ';' | '&' | '|')) {
                    return None;
                }
                word = Word::default();
                i += 3;
            }
            '<' | '(' | ')' | '`' => return None,
            '\\' => {
                match next {
                    // Line continuation.
                    Some('\n') => {}
                    Some(n) => {
                        word.text.push(n);
                        word.quoted = true;
                    }
                    None => return None,
                }
                i += 2;
            }
            '\'' => {
                let close = chars[i + 1..].iter().position(|&c| c == '\'')?;
                word.text.extend(&chars[i + 1..i + 1 + close]);
                word.quoted = true;
                i += close + 2;
            }
            '"' => {
                word.quoted = true;
                i += 1;
                loop {
                    let c = *chars.get(i)?;
                    match c {
                        '"' => {
                            i += 1;
                            break;
                        }
                        '`' => return None,
                        '\\' => {
                            let n = *chars.get(i + 1)?;
                            match n {
                                '\n' => {}
                                '$' | '`' | '"' | '\\' => word.text.push(n),
                                other => {
                                    word.text.push('\\');
                                    word.text.push(other);
                                }
                            }
                            i += 2;
                        }
                        '$' => {
                            dollar(chars.get(i + 1).copied())?;
                            word.expands = true;
                            word.text.push('$');
                            i += 1;
                        }
                        other => {
                            word.text.push(other);
                            i += 1;
                        }
                    }
                }
            }
            '$' => {
                dollar(next)?;
                word.expands = true;
                word.text.push('$');
                i += 1;
            }
            '*' | '?' | '[' | ']' | '{' | '}' => {
                word.globby = true;
                word.text.push(c);
                i += 1;
            }
            other => {
                word.text.push(other);
                i += 1;
            }
        }
    }
    end_part(&mut parts, &mut words, &mut word);
    Some(parts)
}

/// Accepts a `$` followed by `next` only when it is a plain parameter expansion
/// (`$NAME`, `$1`, `$?`, ...).
fn dollar(next: Option<char>) -> Option<()> {
    match next {
        Some(c) if c.is_ascii_alphanumeric() || c == '_' => Some(()),
        Some('?' | '#' | '@' | '*' | '!' | '-' | '$') => Some(()),
        // `$(`, `$((`, `$[`, `${`, `$'`, `$"`, or a `$` at the end: refuse.
        _ => None,
    }
}

/// Programs with no option that writes files or runs other programs, so their
/// arguments may come from globs and variables.
const PLAIN: &[&str] = &[
    "cat", "cmp", "cut", "df", "diff", "du", "echo", "false", "grep", "head", "id", "ls", "nproc", "printenv", "pwd",
    "stat", "tail", "true", "uname", "wc", "which",
];

/// Programs that are read-only only with some options; their arguments must be
/// literal (no globs or variables that could expand into an option).
const CHECKED: &[&str] = &["date", "env", "file", "find", "git", "rg", "sort", "tree", "uniq"];

/// Whether `command` provably only reads. Fails closed.
pub(crate) fn is_read_only(command: &str) -> bool {
    let Some(parts) = split(command) else {
        return false;
    };
    if parts.is_empty() {
        return false;
    }
    if parts.iter().flatten().any(|w| w.text == "sudo") {
        return false;
    }
    parts.iter().all(|words| simple_command_is_read_only(words))
}

fn simple_command_is_read_only(words: &[Word]) -> bool {
    let Some((first, args)) = words.split_first() else {
        return false;
    };
    // `NAME=value cmd`, `$CMD`, `l?`, `/bin/rm`: none of these are accepted.
    if first.globby || first.expands || first.text.contains(['=', '/']) {
        return false;
    }
    let name = first.text.as_str();
    if PLAIN.contains(&name) {
        return true;
    }
    if !CHECKED.contains(&name) || args.iter().any(|a| a.globby || a.expands) {
        return false;
    }
    let args: Vec<&str> = args.iter().map(|a| a.text.as_str()).collect();
    match name {
        // With arguments, `env` runs a program.
        "env" => args.is_empty(),
        "find" => {
            !args.iter().any(|a| ["-exec", "-ok", "-delete", "-fprint", "-fls"].iter().any(|bad| a.starts_with(bad)))
        }
        "sort" => !args.iter().any(|a| short_has(a, &['o']) || long_is(a, &["output", "compress-program"])),
        "tree" => !args.iter().any(|a| short_has(a, &['o', 'R']) || long_is(a, &["output"])),
        "date" => !args.iter().any(|a| short_has(a, &['s']) || long_is(a, &["set"])),
        "file" => !args.iter().any(|a| short_has(a, &['C']) || long_is(a, &["compile"])),
        "rg" => !args.iter().any(|a| long_is(a, &["pre", "pre-glob"])),
        // `uniq IN OUT` writes OUT.
        "uniq" => args.iter().filter(|a| !a.starts_with('-')).count() <= 1,
        "git" => git_is_read_only(&args),
        _ => false,
    }
}

/// A short option cluster (`-abc`) containing any of `letters`.
fn short_has(arg: &str, letters: &[char]) -> bool {
    arg.starts_with('-') && !arg.starts_with("--") && arg[1..].contains(letters)
}

/// A long option that is (an abbreviation of) one of `names`; getopt accepts
/// unambiguous prefixes, so `--out=x` means `--output=x`.
fn long_is(arg: &str, names: &[&str]) -> bool {
    let Some(rest) = arg.strip_prefix("--") else {
        return false;
    };
    let given = rest.split('=').next().unwrap_or(rest);
    !given.is_empty() && names.iter().any(|n| n.starts_with(given))
}

fn git_is_read_only(args: &[&str]) -> bool {
    // The subcommand must come first: global options such as `-c` or `-C` are refused.
    let Some((sub, rest)) = args.split_first() else {
        return false;
    };
    // Options that write a file or run a configured program.
    if rest.iter().any(|a| long_is(a, &["output", "ext-diff"])) {
        return false;
    }
    match *sub {
        "status" | "diff" | "log" | "show" | "rev-parse" | "ls-files" | "blame" => true,
        // Listing only: any positional argument creates a branch, and -d/-D/-m/-c/...
        // change them.
        "branch" => rest.iter().all(|a| {
            matches!(
                *a,
                "-a" | "--all"
                    | "-r"
                    | "--remotes"
                    | "-v"
                    | "-vv"
                    | "--verbose"
                    | "-l"
                    | "--list"
                    | "--show-current"
                    | "--no-color"
            )
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_commands() {
        let cases: &[(&str, bool)] = &[
            // Plain read-only commands and pipelines.
            ("ls", true),
            ("ls -la src", true),
            ("pwd", true),
            ("cat README.md", true),
            ("cat 'a;b'", true),
            ("cat \"a && b\"", true),
            ("grep -r foo . | head", true),
            ("grep -rn 'fn main' src | head -20 | wc -l", true),
            ("rg -n 'TODO|FIXME' src", true),
            ("git status", true),
            ("git diff HEAD~1 -- src", true),
            ("git log --oneline -n 5", true),
            ("git show HEAD:Cargo.toml", true),
            ("git branch", true),
            ("git branch -a -v", true),
            ("git rev-parse --show-toplevel", true),
            ("git ls-files | wc -l", true),
            ("git blame src/lib.rs", true),
            ("git status && git diff", true),
            ("ls; pwd\nwc -l Cargo.toml", true),
            ("find . -name '*.rs' -type f", true),
            ("sort -u names.txt | uniq -c", true),
            ("echo $HOME", true),
            ("echo \"$HOME\"", true),
            ("echo '$(rm x)'", true),
            ("cat *.md", true),
            ("ls 2>&1 | head", true),
            ("ls src 2>&1", true),
            ("env", true),
            ("printenv PATH", true),
            ("date +%s", true),
            ("du -sh . && df -h", true),
            ("true || false", true),
            ("uname -a; id; nproc", true),
            ("which cargo", true),
            ("tree -L 2", true),
            ("ls \\\n  -la", true),
            ("ls &", true),
            // Writes, or things that might write.
            ("git diff && rm -rf x", false),
            ("ls > out", false),
            ("ls >> out", false),
            ("ls 2>/dev/null", false),
            ("ls >/dev/null", false),
            ("ls &> out", false),
            ("ls >&2", false),
            ("ls 2>&1>out", false),
            ("ls2>&1", false),
            ("ls '2'>&1", false),
            ("find . -delete", false),
            ("find . -name x -exec rm {} \\;", false),
            ("find . -execdir rm {} +", false),
            ("find . -ok rm {} \\;", false),
            ("find . -fprint out", false),
            ("echo $(rm x)", false),
            ("echo \"$(rm x)\"", false),
            ("echo `rm x`", false),
            ("echo \"`rm x`\"", false),
            ("echo ${x:=y}", false),
            ("echo $((1+2))", false),
            ("echo $'a'", false),
            ("cat <(rm x)", false),
            ("cat < file", false),
            ("cat <<EOF\nhi\nEOF", false),
            ("(rm x)", false),
            ("{ rm x; }", false),
            ("rm -rf x", false),
            ("sudo ls", false),
            ("ls | sudo tee x", false),
            ("cat 'unterminated", false),
            ("cat \"unterminated", false),
            ("ls \\", false),
            ("", false),
            ("   ", false),
            ("sort -o out in", false),
            ("sort -uo out in", false),
            ("sort --output=out in", false),
            ("sort --out=out in", false),
            ("sort --compress-program=sh in", false),
            ("sort *", false),
            ("sort {-o,out} in", false),
            ("sort $OPTS in", false),
            ("uniq in out", false),
            ("tree -o out", false),
            ("tree -R", false),
            ("date -s 2020-01-01", false),
            ("date --set=x", false),
            ("file -C -m magic", false),
            ("rg --pre sh foo", false),
            ("env rm -rf x", false),
            ("FOO=bar ls", false),
            ("GIT_EXTERNAL_DIFF=rm git diff", false),
            ("$CMD", false),
            ("l?", false),
            ("/bin/rm x", false),
            ("git", false),
            ("git -c core.pager=sh log", false),
            ("git -C /tmp status", false),
            ("git commit -m x", false),
            ("git push", false),
            ("git checkout .", false),
            ("git branch -d main", false),
            ("git branch -D main", false),
            ("git branch -m a b", false),
            ("git branch newbranch", false),
            ("git diff --output=x", false),
            ("git log --out=x", false),
            ("git diff --ext-diff", false),
            ("git diff *", false),
            ("xargs rm", false),
            ("ls | xargs rm", false),
            ("sed -i s/a/b/ f", false),
            ("awk '{print}' f", false),
            ("tee out", false),
            ("ls && cd /tmp && rm x", false),
            ("echo hi | sh", false),
            ("! ls", false),
            ("if true; then ls; fi", false),
        ];
        let wrong: Vec<String> = cases
            .iter()
            .filter(|(cmd, want)| is_read_only(cmd) != *want)
            .map(|(cmd, want)| format!("{cmd:?}: expected {want}"))
            .collect();
        assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
    }
}
