//! The coordinator's secrets: API keys and tokens are read once at start-up, removed
//! from the process environment (so no child inherits them and `/proc/<pid>/environ`
//! no longer shows them), and kept here for the code that needs them (the model
//! providers, GitHub's log masking). [`protect`] also makes the process non-dumpable,
//! so a same-uid process cannot read its memory or environment through `/proc`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The variables that hold secrets orch itself reads.
pub const SECRET_VARS: [&str; 5] =
    ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "GITHUB_TOKEN", "ORCH_GITHUB_TOKEN"];

/// Names an operator adds to [`SECRET_VARS`]: a comma-separated list in this variable
/// (for a key a configured provider reads under another name).
pub const EXTRA_VAR: &str = "ORCH_SECRET_VARS";

static TAKEN: OnceLock<BTreeMap<String, String>> = OnceLock::new();

/// The secret variables to take: [`SECRET_VARS`] and the names listed in [`EXTRA_VAR`].
pub fn names() -> Vec<String> {
    let mut names: Vec<String> = SECRET_VARS.iter().map(|s| s.to_string()).collect();
    if let Ok(extra) = std::env::var(EXTRA_VAR) {
        names.extend(extra.split(',').map(str::trim).filter(|n| !n.is_empty() && !n.contains('=')).map(String::from));
    }
    names.sort();
    names.dedup();
    names
}

/// Reads every secret variable, keeps its value here and removes it from the process
/// environment; then makes the process non-dumpable. Call it first thing in `main`,
/// while the process still has a single thread. A second call keeps what the first one
/// took. Returns how many secrets were taken.
#[allow(unsafe_code)]
pub fn protect() -> usize {
    let mut taken = BTreeMap::new();
    for name in names() {
        if let Some(value) = std::env::var_os(&name) {
            if let Some(value) = value.to_str() {
                taken.insert(name.clone(), value.to_string());
            }
            // SAFETY: `remove_var` is unsound only while another thread may read or
            // write the environment. `protect` runs at the top of `main`, before the
            // async runtime, the logger's or any other thread exists: the process has
            // exactly one thread here.
            unsafe { std::env::remove_var(&name) };
        }
    }
    let count = taken.len();
    if count > 0
        && let Err(e) = wipe_initial_environment(taken.keys())
    {
        tracing::warn!("cannot wipe the secrets from the process's initial environment: {e}");
    }
    let _ = TAKEN.set(taken);
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!("cannot make the coordinator non-dumpable: {e}");
    }
    count
}

/// Overwrites with NULs the `NAME=value` entries of `names` in the environment block
/// the kernel set up at exec, which `/proc/<pid>/environ` shows whatever the process
/// later removes. Writes through `/proc/self/mem` (no unsafe code).
fn wipe_initial_environment<'a>(names: impl Iterator<Item = &'a String>) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt as _;
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let bad = || std::io::Error::other("an unexpected /proc/self/stat");
    let (_, rest) = stat.rsplit_once(')').ok_or_else(bad)?;
    // Fields 50 and 51 (env_start, env_end); `rest` starts at field 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let start: u64 = fields.get(47).and_then(|f| f.parse().ok()).ok_or_else(bad)?;
    let end: u64 = fields.get(48).and_then(|f| f.parse().ok()).ok_or_else(bad)?;
    let len = usize::try_from(end.saturating_sub(start)).map_err(|_| bad())?;
    if len == 0 || len > 16 << 20 {
        return Err(bad());
    }
    let mem = std::fs::OpenOptions::new().read(true).write(true).open("/proc/self/mem")?;
    let mut block = vec![0u8; len];
    mem.read_exact_at(&mut block, start)?;
    let prefixes: Vec<Vec<u8>> = names.map(|n| format!("{n}=").into_bytes()).collect();
    let mut at = 0;
    for entry in block.split(|b| *b == 0) {
        if prefixes.iter().any(|p| entry.starts_with(p)) {
            mem.write_all_at(&vec![0u8; entry.len()], start + at as u64)?;
        }
        at += entry.len() + 1;
    }
    Ok(())
}

/// The value of the secret variable `name`: the one [`protect`] took, or, in a process
/// that never called it (tests, embedders), the environment's. Empty values count as
/// unset.
pub fn var(name: &str) -> Option<String> {
    let value = match TAKEN.get() {
        Some(taken) if taken.contains_key(name) => taken.get(name).cloned(),
        _ => std::env::var(name).ok(),
    };
    value.filter(|v| !v.trim().is_empty())
}

/// Every secret value known, for masking in logs.
pub fn values() -> Vec<String> {
    let mut names = names();
    if let Some(taken) = TAKEN.get() {
        names.extend(taken.keys().cloned());
    }
    names.sort();
    names.dedup();
    names.iter().filter_map(|n| var(n)).collect()
}
