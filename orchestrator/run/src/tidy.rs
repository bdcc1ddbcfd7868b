//! Tidy checks on the crate's own source: the library never prints. Everything a user
//! sees goes through the run's `Reporter` or `crate::notice` (see STYLE.md); a direct
//! write to stdout or stderr would bypass the binary's reporters and panic or fail on a
//! closed pipe.

use std::path::{Path, PathBuf};

/// What writes to the process's stdout or stderr directly.
const FORBIDDEN: [&str; 9] =
    ["println!", "eprintln!", "print!", "eprint!", "dbg!", "io::stdout(", "io::stderr(", "stdout()", "stderr()"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of `text` that is built outside tests: up to its `#[cfg(test)]` module, and
/// nothing of a file that is a test module itself.
fn non_test(path: &Path, text: &str) -> String {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if name == "tests.rs" || name.ends_with("_tests.rs") || name == "render_snapshots.rs" || name == "tidy.rs" {
        return String::new();
    }
    text.split("#[cfg(test)]").next().unwrap_or_default().to_string()
}

/// The forbidden uses in `code`, as `line: text`, comments left out. `hub.stderr()` (a
/// method of orch's own) is not a write.
fn offences(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let writes = FORBIDDEN.iter().any(|pattern| {
            code.match_indices(pattern).any(|(at, _)| {
                let prev = code[..at].chars().next_back();
                let method = pattern.ends_with("()") && prev == Some('.');
                let part_of_name = prev.is_some_and(|c| c.is_alphanumeric() || c == '_');
                !method && !part_of_name
            })
        });
        if writes {
            found.push(format!("{}: {}", n + 1, line.trim()));
        }
    }
    found
}

#[test]
fn the_library_never_writes_to_stdout_or_stderr() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    assert!(files.len() > 50, "the sources were not found");
    let mut bad = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for offence in offences(&non_test(&path, &text)) {
            bad.push(format!("{}:{offence}", path.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "orch-run writes to stdout or stderr itself; send it through the run's Reporter or crate::notice:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_finds_each_kind_of_write() {
    for line in [
        "println!(\"x\");",
        "    eprintln!(\"orch: x\");",
        "eprint!(\"{}\", d);",
        "print!(\"x\")",
        "dbg!(x);",
        "let mut out = std::io::stdout().lock();",
        "let e = io::stderr();",
        "writeln!(stderr(), \"x\")",
    ] {
        assert_eq!(offences(line).len(), 1, "{line}");
    }
    for line in
        ["hub.stderr()", "// println!(\"x\")", "tracing::warn!(\"x\")", "crate::notice::note(x)", "my_print!(x)"]
    {
        assert!(offences(line).is_empty(), "{line}");
    }
    assert!(non_test(Path::new("a.rs"), "ok\n#[cfg(test)]\nmod tests { println!(); }").lines().all(|l| l == "ok"));
}
