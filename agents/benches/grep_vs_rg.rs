//! Our `Grep` tool against ripgrep on a real source tree.
//!
//! ```text
//! cargo bench -p orch-agents --bench grep_vs_rg -- [TREE]
//! ```
//!
//! TREE is the first argument, else `GREP_BENCH_TREE`, else the bench prepares
//! `/tmp/grep-bench-tree`: a copy of the tokio, tokio-util, hyper, reqwest and axum
//! crate sources from the local cargo registry (all dependencies of this workspace),
//! made a git repository so ignore-file handling is as in a real checkout.
//!
//! Both searches look for `fn ` in `count` mode (`rg -c`) and `content` mode (`rg -n`),
//! with a warm-up and then [`RUNS`] timed runs each; the medians are printed as a
//! Markdown table. Our figure is the in-process `DynTool::call` on a tokio runtime;
//! rg's is the wall time of the subprocess, so it includes process start-up (about a
//! millisecond) that ours does not pay. Needs `rg` on PATH (`apt-get install ripgrep`).

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use orch_agents::tools::grep::Grep;
use orch_agents::tools::{DynTool, Session, ToolContext};
use serde_json::json;

type Res<T> = Result<T, Box<dyn Error>>;

const RUNS: usize = 20;
const WARMUP: usize = 3;
const PATTERN: &str = "fn ";
const DEFAULT_TREE: &str = "/tmp/grep-bench-tree";
/// Copied first, in this order; more crates from [`EXTRA_CRATES`] are added only if
/// these hold fewer than [`MIN_FILES`] files.
const CRATES: &[&str] = &["tokio", "tokio-util", "hyper", "reqwest", "axum"];
const EXTRA_CRATES: &[&str] = &["h2", "hyper-util", "rustls", "regex-automata", "tower", "futures-util"];
const MIN_FILES: usize = 800;

fn main() -> Res<()> {
    // `cargo bench` passes `--bench`; the tree is the first argument that is not a flag.
    let arg = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let tree = match arg.or_else(|| std::env::var("GREP_BENCH_TREE").ok()) {
        Some(t) => PathBuf::from(t),
        None => prepare_tree(Path::new(DEFAULT_TREE))?,
    };
    let tree = tree.canonicalize().map_err(|e| format!("{}: {e}", tree.display()))?;
    let rg_version = run_rg(&tree, &["--version"])?;
    let all_files = count_files(&tree)?;
    let searched_files = run_rg(&tree, &["--files"])?.lines().count();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let ctx = ToolContext { session: Arc::new(Session::new(&tree)), cancel: Default::default() };

    println!("tree: {} ({all_files} files, {searched_files} searched after ignore rules)", tree.display());
    println!("rg: {}", rg_version.lines().next().unwrap_or("?"));
    println!("cores: {cores}; pattern: {PATTERN:?}; runs: {RUNS} after {WARMUP} warm-up\n");
    let spawn = measure(|| {
        let start = Instant::now();
        run_rg(&tree, &["--version"])?;
        Ok((start.elapsed(), String::new()))
    })?
    .0;
    println!("rg process start-up alone (`rg --version`, median): {:.2} ms\n", ms(spawn));
    println!("| mode | ours (median ms) | rg (median ms) | ours / rg | output lines | same output |");
    println!("| --- | ---: | ---: | ---: | ---: | --- |");
    for (mode, rg_flag) in [("count", "-c"), ("content", "-n")] {
        let input = json!({"pattern": PATTERN, "output_mode": mode});
        let ours_once = || -> Res<(Duration, String)> {
            let start = Instant::now();
            let out = runtime.block_on(DynTool::call(&Grep, input.clone(), &ctx))?;
            Ok((start.elapsed(), out))
        };
        let rg_once = || -> Res<(Duration, String)> {
            let start = Instant::now();
            let out = run_rg(&tree, &[rg_flag, PATTERN])?;
            Ok((start.elapsed(), out))
        };
        let (ours, ours_out) = measure(ours_once)?;
        let (rg, rg_out) = measure(rg_once)?;
        let same = same_lines(&ours_out, &rg_out);
        println!(
            "| {mode} | {:.2} | {:.2} | {:.2}× | {} | {} |",
            ms(ours),
            ms(rg),
            ours.as_secs_f64() / rg.as_secs_f64(),
            ours_out.lines().count(),
            if same { "yes" } else { "NO" }
        );
    }
    Ok(())
}

/// Warms up, then returns the median of [`RUNS`] timings and the last output.
fn measure(mut once: impl FnMut() -> Res<(Duration, String)>) -> Res<(Duration, String)> {
    for _ in 0..WARMUP {
        once()?;
    }
    let mut times = Vec::with_capacity(RUNS);
    let mut last = String::new();
    for _ in 0..RUNS {
        let (t, out) = once()?;
        times.push(t);
        last = out;
    }
    times.sort();
    let median = (times[(RUNS - 1) / 2] + times[RUNS / 2]) / 2;
    Ok((median, last))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Whether two outputs hold the same lines, in any order (rg's order is unsorted).
fn same_lines(a: &str, b: &str) -> bool {
    let mut a: Vec<&str> = a.lines().collect();
    let mut b: Vec<&str> = b.lines().collect();
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

/// Runs rg in `dir` with no path argument (so paths print without `./`).
fn run_rg(dir: &Path, args: &[&str]) -> Res<String> {
    let out = Command::new("rg")
        .arg("--no-config")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run rg ({e}); install it with `apt-get install -y ripgrep`"))?;
    // 1 means "no match", which is not an error here.
    if !out.status.success() && out.status.code() != Some(1) {
        return Err(format!("rg {args:?} failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Every regular file under `dir`, except inside `.git`.
fn count_files(dir: &Path) -> Res<usize> {
    let mut n = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() && entry.file_name() != ".git" {
            n += count_files(&entry.path())?;
        } else if kind.is_file() {
            n += 1;
        }
    }
    Ok(n)
}

/// Makes the default tree from the local cargo registry, or reuses it if made before.
fn prepare_tree(dest: &Path) -> Res<PathBuf> {
    // Inside `.git`, so it is neither counted nor searched.
    let marker = dest.join(".git").join("bench-tree");
    if marker.is_file() {
        return Ok(dest.to_path_buf());
    }
    let registry = registry_src()?;
    if dest.exists() {
        std::fs::remove_dir_all(dest)?;
    }
    std::fs::create_dir_all(dest)?;
    let mut copied = Vec::new();
    let mut files = 0;
    for name in CRATES.iter().chain(EXTRA_CRATES) {
        if files >= MIN_FILES && !CRATES.contains(name) {
            break;
        }
        let Some(src) = newest_crate(&registry, name)? else {
            eprintln!("note: crate {name} not found in {}", registry.display());
            continue;
        };
        let Some(dir_name) = src.file_name() else { continue };
        let target = dest.join(dir_name);
        copy_dir(&src, &target)?;
        files += count_files(&target)?;
        copied.push(dir_name.to_string_lossy().into_owned());
    }
    if files < MIN_FILES {
        return Err(format!("only {files} files found for the bench tree; pass a tree path").into());
    }
    let status = Command::new("git").args(["init", "-q"]).current_dir(dest).status()?;
    if !status.success() {
        return Err("git init failed".into());
    }
    std::fs::write(&marker, copied.join("\n") + "\n")?;
    eprintln!("prepared {} from {}: {}", dest.display(), registry.display(), copied.join(", "));
    Ok(dest.to_path_buf())
}

/// `$CARGO_HOME/registry/src/index.crates.io-*`.
fn registry_src() -> Res<PathBuf> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let src = cargo_home.join("registry").join("src");
    for entry in std::fs::read_dir(&src).map_err(|e| format!("{}: {e}", src.display()))? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with("index.crates.io-") {
            return Ok(entry.path());
        }
    }
    Err(format!("no crates.io sources under {}", src.display()).into())
}

/// The directory of the highest version of crate `name` in the registry sources.
fn newest_crate(registry: &Path, name: &str) -> Res<Option<PathBuf>> {
    let prefix = format!("{name}-");
    let mut best: Option<(Vec<u64>, PathBuf)> = None;
    for entry in std::fs::read_dir(registry)? {
        let entry = entry?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(version) = file_name.strip_prefix(&prefix) else { continue };
        // `tokio-util-0.7` also starts with `tokio-`: a version starts with a digit.
        if !version.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let key: Vec<u64> = version.split(['.', '-', '+']).map(|p| p.parse().unwrap_or(0)).collect();
        if best.as_ref().is_none_or(|(k, _)| key > *k) {
            best = Some((key, entry.path()));
        }
    }
    Ok(best.map(|(_, p)| p))
}

fn copy_dir(src: &Path, dest: &Path) -> Res<()> {
    std::fs::create_dir_all(dest)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let to = dest.join(entry.file_name());
        if kind.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}
