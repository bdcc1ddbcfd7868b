//! `orch init [RECIPE]`: writes one of the GitHub recipes of `examples/github/` (an orch
//! workflow and the GitHub Actions workflow that runs it) into the repository around the
//! current directory, where the recipe's header says (`install: SRC -> DEST`).
//!
//! - The files are the recipe's own, embedded in the binary, with every `uses:` of the
//!   orch Action pointed at the released major version ([`ACTION`]).
//! - Nothing is overwritten without `--force`: when any target exists, nothing is
//!   written at all.
//! - The orch workflow is then checked as `orch validate` checks it (the same function),
//!   and what the GitHub job needs (its secrets and its token's permissions) is read
//!   from the written Actions workflow and printed, so the list cannot drift from it.
//! - `orch init --list` prints one line per recipe on stdout (it is the data).

use std::path::{Path, PathBuf};

use crate::cli::{InitArgs, ValidateArgs};
use crate::exit::Code;

/// How a GitHub workflow names the orch Action: the repository and the moving major tag
/// that each release moves (see action.yml and the README's GitHub Actions section).
pub const ACTION: &str = "orch-ci/orch@v1";

/// One file of a recipe.
#[derive(Debug)]
pub struct RecipeFile {
    /// Where it is in orch's repository (the recipe's `install:` source).
    pub source: &'static str,
    /// Where it goes in the user's repository, from its root.
    pub dest: &'static str,
    /// Its text.
    pub text: &'static str,
    /// Whether it is the GitHub Actions workflow (else the orch workflow).
    pub actions: bool,
}

/// A recipe: a GitHub Actions workflow and the orch workflow it runs.
#[derive(Debug)]
pub struct Recipe {
    pub name: &'static str,
    /// One line for `--list`.
    pub summary: &'static str,
    pub files: [RecipeFile; 2],
}

macro_rules! recipe_file {
    ($source:literal, $dest:literal, $actions:literal) => {
        RecipeFile {
            source: $source,
            dest: $dest,
            text: include_str!(concat!("../../../", $source)),
            actions: $actions,
        }
    };
}

/// Every recipe, in the order `--list` shows them.
pub const RECIPES: [Recipe; 3] = [
    Recipe {
        name: "pr-review",
        summary: "review each pull request: one read-only reviewer per changed file, one review with inline comments",
        files: [
            recipe_file!("examples/github/orch/review.yaml", ".github/orch/review.yaml", false),
            recipe_file!("examples/github/pr-review.yml", ".github/workflows/orch-review.yml", true),
        ],
    },
    Recipe {
        name: "nightly-refactor",
        summary: "a nightly sweep sharded over a job matrix: branches per fixed file, one issue with the report",
        files: [
            recipe_file!("examples/github/orch/nightly.yaml", ".github/orch/nightly.yaml", false),
            recipe_file!("examples/github/nightly-refactor.yml", ".github/workflows/orch-nightly.yml", true),
        ],
    },
    Recipe {
        name: "issue-triage",
        summary: "triage each new issue: its kind, a summary and the files to look at, as one comment",
        files: [
            recipe_file!("examples/github/orch/triage.yaml", ".github/orch/triage.yaml", false),
            recipe_file!("examples/github/issue-triage.yml", ".github/workflows/orch-triage.yml", true),
        ],
    },
];

/// The `--list` text: one line per recipe, name then summary.
pub fn list() -> String {
    let width = RECIPES.iter().map(|r| r.name.len()).max().unwrap_or(0);
    RECIPES.iter().map(|r| format!("{:width$}  {}\n", r.name, r.summary)).collect()
}

/// The recipe called `name`, or the message that says which names there are.
fn find(name: &str) -> Result<&'static Recipe, String> {
    if let Some(recipe) = RECIPES.iter().find(|r| r.name == name) {
        return Ok(recipe);
    }
    let closest = RECIPES
        .iter()
        .map(|r| (strsim::jaro_winkler(&name.to_lowercase(), r.name), r.name))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let hint = closest.map(|(_, n)| format!("did you mean `{n}`? ")).unwrap_or_default();
    let names: Vec<&str> = RECIPES.iter().map(|r| r.name).collect();
    Err(format!("unknown recipe `{name}`; {hint}the recipes are {} (see `orch init --list`)", names.join(", ")))
}

/// `text` with every `uses:` of an orch Action (`<owner>/orch@<ref>`, a placeholder
/// owner included) replaced by [`ACTION`].
pub fn pin_action(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let (dash, rest) = match body.strip_prefix("- ") {
            Some(rest) => ("- ", rest.trim_start()),
            None => ("", body),
        };
        let Some(value) = rest.strip_prefix("uses:") else {
            out.push_str(line);
            continue;
        };
        let value = value.trim();
        // The comment keeps its spacing: `reference` is a prefix of `value`.
        let reference = value.find(" #").map_or(value, |at| value[..at].trim_end());
        let comment = &value[reference.len()..];
        let is_orch = reference
            .split_once('@')
            .is_some_and(|(repo, _)| repo.split_once('/').is_some_and(|(_, name)| name == "orch"));
        if !is_orch {
            out.push_str(line);
            continue;
        }
        let end = if line.ends_with('\n') { "\n" } else { "" };
        out.push_str(&format!("{indent}{dash}uses: {ACTION}{comment}{end}"));
    }
    out
}

/// What a GitHub job needs to run a recipe's Actions workflow, read from its text.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// The secrets it names (`secrets.NAME`), other than GitHub's own token.
    pub secrets: Vec<String>,
    /// The token's permissions: `(scope, ["contents: read", ...])`, the workflow's
    /// (scope `workflow`) first, then each job that sets its own (`job NAME`).
    pub permissions: Vec<(String, Vec<String>)>,
}

/// Reads [`Needs`] from the text of a GitHub Actions workflow.
pub fn needs(text: &str) -> Needs {
    let mut secrets: Vec<String> = Vec::new();
    for (at, _) in text.match_indices("secrets.") {
        let name: String =
            text[at + "secrets.".len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !name.is_empty() && name != "GITHUB_TOKEN" && !secrets.contains(&name) {
            secrets.push(name);
        }
    }
    let mut permissions = Vec::new();
    let scopes = |value: &serde_json::Value| -> Vec<String> {
        match value {
            serde_json::Value::Object(map) => map
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())))
                .collect(),
            serde_json::Value::String(all) => vec![all.clone()],
            _ => Vec::new(),
        }
    };
    if let Ok(doc) = orch_workflows::yaml::load_value("workflow", text.as_bytes()) {
        if let Some(p) = doc.get("permissions") {
            permissions.push(("workflow".to_string(), scopes(p)));
        }
        if let Some(serde_json::Value::Object(jobs)) = doc.get("jobs") {
            for (name, job) in jobs {
                if let Some(p) = job.get("permissions") {
                    permissions.push((format!("job {name}"), scopes(p)));
                }
            }
        }
    }
    Needs { secrets, permissions }
}

/// The root of the working tree around the current directory.
fn repo_root() -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let repo = git2::Repository::discover(&cwd).map_err(|_| {
        format!(
            "{} is not in a git repository; run `orch init` inside the repository the recipe is for (or `git init` \
             first)",
            cwd.display()
        )
    })?;
    repo.workdir()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("the repository at {} is bare; run `orch init` in a checkout", repo.path().display()))
}

/// `orch init`.
pub fn run(args: &InitArgs) -> Code {
    if args.list {
        use std::io::Write as _;
        let _ = std::io::stdout().write_all(list().as_bytes());
        return Code::Success;
    }
    let Some(name) = args.recipe.as_deref() else {
        say!("error: name the recipe to write: `orch init RECIPE`; the recipes are:");
        say_raw!("{}", list());
        return Code::Usage;
    };
    let recipe = match find(name) {
        Ok(recipe) => recipe,
        Err(message) => {
            say!("error: {message}");
            return Code::Usage;
        }
    };
    let root = match repo_root() {
        Ok(root) => root,
        Err(message) => {
            say!("error: {message}");
            return Code::Usage;
        }
    };
    if !args.force {
        let existing: Vec<&str> =
            recipe.files.iter().map(|f| f.dest).filter(|d| std::fs::symlink_metadata(root.join(d)).is_ok()).collect();
        if !existing.is_empty() {
            say!(
                "error: {} already exist{}; nothing was written; pass --force to overwrite {}",
                existing.join(" and "),
                if existing.len() == 1 { "s" } else { "" },
                if existing.len() == 1 { "it" } else { "them" }
            );
            return Code::Usage;
        }
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| root.clone());
    let shown = |dest: &str| -> PathBuf {
        let path = root.join(dest);
        path.strip_prefix(&cwd).map(Path::to_path_buf).unwrap_or(path)
    };
    let mut actions_text = String::new();
    for file in &recipe.files {
        let path = root.join(file.dest);
        let text = if file.actions { pin_action(file.text) } else { file.text.to_string() };
        // A link in its place (`--force`) is replaced, never written through.
        let unlinked = match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => std::fs::remove_file(&path),
            _ => Ok(()),
        };
        let written = unlinked
            .and_then(|()| path.parent().map_or(Ok(()), std::fs::create_dir_all))
            .and_then(|()| std::fs::write(&path, &text));
        if let Err(e) = written {
            say!("error: cannot write {}: {e}; check that the directory is writable", path.display());
            return Code::Infrastructure;
        }
        let what = if file.actions { "the GitHub Actions workflow" } else { "the orch workflow" };
        say!("orch: wrote {} ({what}, {} of orch's repository)", shown(file.dest).display(), file.source);
        if file.actions {
            actions_text = text;
        }
    }
    for file in recipe.files.iter().filter(|f| !f.actions) {
        let checked = ValidateArgs { workflow: shown(file.dest), trust_repo_config: true, config_ref: None };
        let code = crate::plan_cmd::validate(&checked);
        if code != Code::Success {
            say!("error: the recipe's workflow {} does not validate in this repository", shown(file.dest).display());
            return code;
        }
    }
    let needs = needs(&actions_text);
    say!("orch: the GitHub job needs:");
    for secret in &needs.secrets {
        say!("orch:   the secret {secret} (Settings > Secrets and variables > Actions)");
    }
    for (scope, granted) in &needs.permissions {
        say!("orch:   permissions ({scope}): {}", granted.join(", "));
    }
    say!("orch: commit the files on the default branch: in a pull-request run orch reads its workflow from there");
    Code::Success
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_recipe_file_is_where_its_header_says() {
        for recipe in &RECIPES {
            let actions = recipe.files.iter().find(|f| f.actions).unwrap();
            for file in &recipe.files {
                let line = format!("install: {} -> {}", file.source, file.dest);
                assert!(actions.text.contains(&line), "{} does not say `{line}`", actions.source);
            }
        }
    }

    #[test]
    fn the_action_is_pinned() {
        let text = "steps:\n  - uses: actions/checkout@v4\n  - uses: <owner>/orch@main   # the action\n    \
                    with: {}\n  - id: x\n    uses: someone/orch@v0.3.1\n";
        let pinned = pin_action(text);
        assert_eq!(
            pinned,
            "steps:\n  - uses: actions/checkout@v4\n  - uses: orch-ci/orch@v1   # the action\n    with: {}\n  - \
             id: x\n    uses: orch-ci/orch@v1\n"
        );
    }

    #[test]
    fn needs_come_from_the_workflow() {
        let needs = needs(RECIPES[1].files[1].text);
        assert_eq!(needs.secrets, vec!["ANTHROPIC_API_KEY".to_string()]);
        assert_eq!(
            needs.permissions,
            vec![
                ("workflow".to_string(), vec!["contents: write".to_string()]),
                ("job merge".to_string(), vec!["contents: read".to_string(), "issues: write".to_string()]),
            ]
        );
    }

    #[test]
    fn unknown_recipes_get_the_closest_name() {
        let message = find("pr-reveiw").unwrap_err();
        assert!(message.contains("did you mean `pr-review`?"), "{message}");
        assert!(message.contains("pr-review, nightly-refactor, issue-triage"), "{message}");
        assert!(!find("zzzz").unwrap_err().contains("did you mean"));
    }
}
