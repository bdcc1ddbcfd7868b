//! Path rules: Claude Code's path specifiers turned into gitignore patterns with a
//! root, and the filter the tool host uses to keep denied paths out of search results.
//!
//! `//p` is absolute, `~/p` is under the home directory, `/p` is under the directory
//! the rule's settings file gives, `./p` is under the working directory, and a bare
//! `p` follows gitignore: without a slash it matches at any depth under the working
//! directory, with one it is anchored there.

use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use serde::{Deserialize, Serialize};

/// Folds `.` and `..` without touching the file system.
pub fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

tokio::task_local! {
    static HIDDEN: std::sync::Arc<PathFilter>;
}

/// The paths the current call must not show, set by the tool host for the duration of
/// the call ([`hiding`]); empty outside one.
pub fn hidden_paths() -> std::sync::Arc<PathFilter> {
    HIDDEN.try_with(std::sync::Arc::clone).unwrap_or_default()
}

/// Runs `call` with `filter` as the paths it must not show.
pub async fn hiding<F: std::future::Future>(filter: std::sync::Arc<PathFilter>, call: F) -> F::Output {
    HIDDEN.scope(filter, call).await
}

/// One gitignore pattern and the directory it is relative to. This is what travels to
/// the tool host so it can hide what the pattern covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathPattern {
    pub root: PathBuf,
    pub pattern: String,
}

/// The directories a path specifier can be relative to.
#[derive(Debug, Clone, Copy)]
pub struct Bases<'a> {
    pub cwd: &'a Path,
    pub home: Option<&'a Path>,
    /// The directory of the settings file the rule came from (`/p` rules).
    pub settings_dir: &'a Path,
}

impl PathPattern {
    /// Turns a Claude Code path specifier into a rooted gitignore pattern.
    pub fn from_specifier(spec: &str, bases: Bases<'_>) -> Result<PathPattern, String> {
        let spec = spec.trim();
        if spec.starts_with('!') {
            return Err("a path rule cannot be negated with `!`; write a deny or allow rule instead".into());
        }
        let (root, pattern) = if let Some(rest) = spec.strip_prefix("//") {
            (PathBuf::from("/"), format!("/{rest}"))
        } else if spec == "~" || spec.starts_with("~/") {
            let home = bases.home.ok_or("the rule starts with `~` but no home directory is known")?;
            let rest = spec.trim_start_matches('~').trim_start_matches('/');
            (home.to_path_buf(), if rest.is_empty() { "/**".to_string() } else { format!("/{rest}") })
        } else if let Some(rest) = spec.strip_prefix("./") {
            (bases.cwd.to_path_buf(), format!("/{rest}"))
        } else if spec.starts_with('/') {
            (bases.settings_dir.to_path_buf(), spec.to_string())
        } else if spec.starts_with('~') {
            return Err(
                "`~user` paths are not supported; write `~/` for the home directory or an absolute `//` path".into()
            );
        } else {
            (bases.cwd.to_path_buf(), spec.to_string())
        };
        if pattern.trim_matches('/').is_empty() && pattern != "/**" {
            return Err("the path is empty".into());
        }
        let pattern = PathPattern { root: normalize(&root), pattern };
        pattern.compile()?;
        Ok(pattern)
    }

    /// Builds the matcher; the error says why the pattern is not a valid glob.
    pub fn compile(&self) -> Result<PathMatcher, String> {
        if !self.root.is_absolute() {
            return Err(format!("the base directory {} is not absolute", self.root.display()));
        }
        let mut builder = GitignoreBuilder::new(&self.root);
        builder.add_line(None, &self.pattern).map_err(|e| format!("not a valid pattern: {e}"))?;
        let matcher = builder.build().map_err(|e| format!("not a valid pattern: {e}"))?;
        Ok(PathMatcher { root: self.root.clone(), matcher })
    }
}

/// A compiled [`PathPattern`].
#[derive(Debug, Clone)]
pub struct PathMatcher {
    root: PathBuf,
    matcher: Gitignore,
}

impl PathMatcher {
    /// Whether the pattern covers `path` (absolute and normalized), a parent directory of
    /// it, or everything inside it (so searching a denied directory is covered too).
    pub fn covers(&self, path: &Path) -> bool {
        self.covers_entry(path) || self.hit(&path.join("_"), false)
    }

    /// Whether the pattern covers `path` or a parent directory of it.
    pub fn covers_entry(&self, path: &Path) -> bool {
        self.hit(path, false) || self.hit(path, true)
    }

    fn hit(&self, path: &Path, is_dir: bool) -> bool {
        // The matcher asserts that the path is under its root; outside it, nothing matches.
        if !path.is_absolute() || !path.starts_with(&self.root) || path == self.root {
            return false;
        }
        self.matcher.matched_path_or_any_parents(path, is_dir).is_ignore()
    }
}

/// The paths a tool call must not show: built in the tool host from the patterns the
/// pipeline sends with the request.
#[derive(Debug, Clone, Default)]
pub struct PathFilter {
    matchers: Vec<PathMatcher>,
}

impl PathFilter {
    pub fn new(patterns: &[PathPattern]) -> Result<PathFilter, String> {
        let matchers = patterns.iter().map(PathPattern::compile).collect::<Result<Vec<_>, _>>()?;
        Ok(PathFilter { matchers })
    }

    pub fn is_empty(&self) -> bool {
        self.matchers.is_empty()
    }

    /// Whether `path` (absolute) or a directory above it is hidden. A directory whose
    /// contents are hidden (`secrets/**`) is hidden itself.
    pub fn hides(&self, path: &Path, is_dir: bool) -> bool {
        if self.matchers.is_empty() {
            return false;
        }
        let path = normalize(path);
        if is_dir {
            self.matchers.iter().any(|m| m.covers(&path))
        } else {
            self.matchers.iter().any(|m| m.covers_entry(&path))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bases() -> Bases<'static> {
        Bases { cwd: Path::new("/w/tree/sub"), home: Some(Path::new("/home/u")), settings_dir: Path::new("/w/tree") }
    }

    fn covers(spec: &str, path: &str) -> bool {
        PathPattern::from_specifier(spec, bases()).unwrap().compile().unwrap().covers(Path::new(path))
    }

    #[test]
    fn the_four_anchors() {
        assert!(covers("//etc/passwd", "/etc/passwd"));
        assert!(!covers("//etc/passwd", "/w/tree/sub/etc/passwd"));
        assert!(covers("~/.ssh/**", "/home/u/.ssh/id_rsa"));
        assert!(covers("/secrets/**", "/w/tree/secrets/a"));
        assert!(!covers("/secrets/**", "/w/tree/sub/secrets/a"));
        assert!(covers("./secrets/**", "/w/tree/sub/secrets/a"));
        assert!(covers("secrets/**", "/w/tree/sub/secrets/a"));
        assert!(!covers("secrets/**", "/w/tree/sub/x/secrets/a"));
        assert!(covers(".env*", "/w/tree/sub/x/.env.local"));
        assert!(!covers(".env*", "/w/tree/.env"));
    }

    #[test]
    fn directories_and_their_contents() {
        assert!(covers("secrets/", "/w/tree/sub/secrets/key.txt"));
        assert!(covers("secrets/**", "/w/tree/sub/secrets"));
        assert!(!covers("secrets/*.txt", "/w/tree/sub/secrets"));
        assert!(covers("~", "/home/u/x"));
    }

    #[test]
    fn bad_specifiers() {
        assert!(PathPattern::from_specifier("!x", bases()).is_err());
        assert!(PathPattern::from_specifier("~bob/x", bases()).is_err());
        let no_home = Bases { home: None, ..bases() };
        assert!(PathPattern::from_specifier("~/x", no_home).is_err());
    }
}
