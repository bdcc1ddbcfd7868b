//! The book under `docs/`: its generated reference pages are current (`orch __docs-gen`
//! writes them again and they must not differ; `ORCH_UPDATE_DOCS=1` rewrites them),
//! every link inside it (and in the README) resolves offline, file and `#anchor`, and
//! `mdbook build` succeeds when mdbook is installed (`.ci/setup.sh` installs it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::orch;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

#[test]
fn generated_reference_pages_are_current() {
    let src = workspace().join("docs/src");
    if std::env::var_os("ORCH_UPDATE_DOCS").is_some() {
        let out = orch().arg("__docs-gen").arg(&src).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let dir = tempfile::tempdir().unwrap();
    let out = orch().arg("__docs-gen").arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for page in ["reference/cli.md", "reference/workflow-keys.md"] {
        let made = std::fs::read_to_string(dir.path().join(page)).unwrap();
        let committed = std::fs::read_to_string(src.join(page)).unwrap_or_default();
        assert!(
            made == committed,
            "docs/src/{page} is stale; rerun with ORCH_UPDATE_DOCS=1 (cargo nextest run -p orch docs) to remake it"
        );
    }
    let cli = std::fs::read_to_string(src.join("reference/cli.md")).unwrap();
    for command in ["## `orch run`", "## `orch init`", "## `orch runs clean`", "## `orch sandbox run`"] {
        assert!(cli.contains(command), "the CLI page has no {command}");
    }
    assert!(!cli.contains("__tool-host"), "the CLI page shows a hidden subcommand");
    let keys = std::fs::read_to_string(src.join("reference/workflow-keys.md")).unwrap();
    assert!(keys.contains("| `agents` (required) |") && keys.contains("## Agent\n"), "{keys}");
}

/// The text of `markdown` without fenced code blocks and inline code spans (which hold
/// no links), line for line.
fn prose(markdown: &str) -> String {
    let mut out = String::new();
    let mut fence: Option<&str> = None;
    for line in markdown.lines() {
        let trimmed = line.trim_start();
        match fence {
            Some(marker) => {
                if trimmed.starts_with(marker) {
                    fence = None;
                }
                out.push('\n');
                continue;
            }
            None if trimmed.starts_with("```") || trimmed.starts_with("~~~") => {
                fence = Some(&trimmed[..3]);
                out.push('\n');
                continue;
            }
            None => {}
        }
        // Inline code: drop what is between runs of backticks.
        let mut rest = line;
        while let Some(at) = rest.find('`') {
            out.push_str(&rest[..at]);
            let ticks = rest[at..].chars().take_while(|c| *c == '`').count();
            let after = &rest[at + ticks..];
            match after.find(&"`".repeat(ticks)) {
                Some(end) => rest = &after[end + ticks..],
                None => {
                    rest = after;
                    break;
                }
            }
        }
        out.push_str(rest);
        out.push('\n');
    }
    out
}

/// The anchors of a page's headings as mdBook makes them: the heading's text without
/// markup, lower case, spaces to `-`, only letters, digits, `-` and `_` kept; a repeated
/// one gets `-1`, `-2`.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fence = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~") {
            fence = !fence;
        }
        if fence {
            continue;
        }
        let Some(text) = line.strip_prefix('#').map(|l| l.trim_start_matches('#')) else {
            continue;
        };
        if !text.starts_with(' ') {
            continue;
        }
        // A link in a heading keeps its text only.
        let mut plain = String::new();
        let mut rest = text.trim();
        while let Some(open) = rest.find("](") {
            plain.push_str(&rest[..open]);
            rest = rest[open + 2..].split_once(')').map_or("", |(_, after)| after);
        }
        plain.push_str(rest);
        let id: String = plain
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(id.clone()).or_insert(0);
        out.insert(if *n == 0 { id.clone() } else { format!("{id}-{n}") });
        *n += 1;
    }
    out
}

/// The link targets of `markdown`'s prose: `[text](target)`, `[name]: target` and
/// `{{#include path}}`.
fn links(markdown: &str) -> Vec<String> {
    let text = prose(markdown);
    let mut found = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or_default();
        found.push(target.trim_matches(|c| c == '<' || c == '>').to_string());
        rest = &after[end..];
    }
    for line in text.lines() {
        if let Some((label, target)) = line.trim_start().split_once("]: ")
            && label.starts_with('[')
            && !label.contains('(')
        {
            found.push(target.trim().to_string());
        }
        for (at, _) in line.match_indices("{{#include ") {
            let path = line[at + "{{#include ".len()..].split("}}").next().unwrap_or_default();
            found.push(path.split(':').next().unwrap_or_default().trim().to_string());
        }
    }
    found
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            markdown_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Every broken relative link of `files`: `file: target (why)`.
fn broken_links(files: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for target in links(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            if !resolved.exists() {
                broken.push(format!("{}: {target} (no such file)", file.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let page = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&page).contains(anchor) {
                    broken.push(format!("{}: {target} (no heading makes #{anchor})", file.display()));
                }
            }
        }
    }
    broken
}

#[test]
fn links_in_the_book_resolve() {
    let mut files = Vec::new();
    markdown_files(&workspace().join("docs/src"), &mut files);
    files.sort();
    assert!(files.len() > 20, "{files:?}");
    files.push(workspace().join("README.md"));
    let broken = broken_links(&files);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // Every page is in the summary, so mdBook builds it.
    let summary = std::fs::read_to_string(workspace().join("docs/src/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    for file in files.iter().filter(|f| f.starts_with(workspace().join("docs/src"))) {
        let rel = file.strip_prefix(workspace().join("docs/src")).unwrap().to_string_lossy().into_owned();
        assert!(rel == "SUMMARY.md" || listed.contains(&rel), "docs/src/{rel} is not in SUMMARY.md");
    }
}

#[test]
fn the_link_checker_finds_broken_links() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.md"), "# The `b` page\n\n## Twice\n\n## Twice\n").unwrap();
    let good = "[a](b.md) [b](b.md#the-b-page) [c](b.md#twice-1) [d](#here) `[no](x.md)`\n\n# Here\n\
                ```\n[no](y.md)\n```\n[e]: https://example.com\n";
    std::fs::write(dir.path().join("a.md"), good).unwrap();
    assert_eq!(broken_links(&[dir.path().join("a.md")]), Vec::<String>::new());
    std::fs::write(dir.path().join("c.md"), "[x](nope.md) [y](b.md#twice-2) [z](#gone)\n").unwrap();
    let broken = broken_links(&[dir.path().join("c.md")]);
    assert_eq!(broken.len(), 3, "{broken:?}");
}

#[test]
fn the_book_builds() {
    if Command::new("mdbook").arg("--version").output().is_err() {
        assert!(std::env::var_os("CI").is_none(), "mdbook is missing: run .ci/setup.sh");
        eprintln!("skipped: mdbook is not installed (run .ci/setup.sh)");
        return;
    }
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new("mdbook")
        .arg("build")
        .arg(workspace().join("docs"))
        .arg("--dest-dir")
        .arg(out_dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mdbook build failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out_dir.path().join("reference/cli.html").is_file());
}

/// The ```yaml blocks of `markdown` that are whole workflows (they start with `version:`
/// after comments).
fn workflows_in(markdown: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = markdown;
    while let Some(at) = rest.find("```yaml\n") {
        let body = &rest[at + "```yaml\n".len()..];
        let end = body.find("\n```").unwrap_or(body.len());
        let block = &body[..end];
        if block.lines().find(|l| !l.trim_start().starts_with('#')).is_some_and(|l| l.starts_with("version:")) {
            found.push(format!("{block}\n"));
        }
        rest = &body[end..];
    }
    found
}

#[test]
fn the_workflows_of_the_front_pages_validate() {
    let dir = tempfile::tempdir().unwrap();
    crate::support::git(dir.path(), &["init", "-q", "-b", "main"]);
    let mut checked = 0;
    for page in ["README.md", "docs/src/guide/first-workflow.md"] {
        let text = std::fs::read_to_string(workspace().join(page)).unwrap();
        for (i, workflow) in workflows_in(&text).into_iter().enumerate() {
            let file = dir.path().join(format!("w{checked}.yaml"));
            std::fs::write(&file, &workflow).unwrap();
            let out = orch().current_dir(dir.path()).arg("validate").arg(&file).output().unwrap();
            assert!(
                out.status.success(),
                "workflow {i} of {page} is invalid:\n{workflow}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "only {checked} workflows found");
}
