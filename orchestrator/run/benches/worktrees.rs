//! Worktree creation: ours (`RunClone::add_worktree_blocking`, git2) against
//! `git worktree add`, on the same repository.
//!
//! ```text
//! cargo bench -p orch-run --bench worktrees -- [REPO]...
//! ```
//!
//! Each REPO is a git repository (its HEAD is the base). With none, the bench prepares
//! two under `/tmp/orch-worktree-bench/` from the local cargo registry and reuses them
//! afterwards: `tokio` (the newest tokio crate source) and `crates` (tokio, tokio-util,
//! hyper, reqwest, axum, and more crates until there are at least 800 files), each one
//! commit, then `git gc` so objects are packed as in a real clone.
//!
//! For each repository it makes a run clone (as `orch run` does) and times, interleaved
//! so that load affects all alike, [`WARMUP`] + [`RUNS`] creations of one worktree on a
//! new branch at the base with:
//! - ours: `RunClone::add_worktree_blocking` (admin dir by hand, libgit2 checkout);
//! - git: `git worktree add -q -b <branch> <path> <base>` in the run clone, as a
//!   subprocess (its figure includes process start-up, as the issue's figures do);
//! - `git_worktree_add`: libgit2's own `Repository::worktree`, for reference.
//!
//! Worktrees are kept until the end, as in a run where every agent has one (removing
//! each before the next made ext4's inode allocator the bottleneck: it skips inodes
//! freed moments ago, and that scan took over two thirds of the time, for both). So
//! run `i` of each method sees `i` worktrees of each method before it. The medians are
//! printed as a Markdown table: wall time, and CPU time (user + system: ours from
//! `getrusage(RUSAGE_THREAD)`, git's from `getrusage(RUSAGE_CHILDREN)`, which includes
//! the processes it spawns), the steadier figure on a loaded machine.

use orch_run::git;
use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};
use nix::sys::time::TimeValLike as _;

type Res<T> = Result<T, Box<dyn Error>>;

const RUNS: usize = 15;
const WARMUP: usize = 3;
const BENCH_DIR: &str = "/tmp/orch-worktree-bench";
const MARKER: &str = "orch-bench-tree";
const BIG_CRATES: &[&str] = &[
    "tokio",
    "tokio-util",
    "hyper",
    "reqwest",
    "axum",
    "h2",
    "hyper-util",
    "rustls",
    "regex-automata",
    "tower",
    "futures-util",
];
const MIN_BIG_FILES: usize = 800;
/// Worktrees made at once in the fan-out measurement.
const FAN_OUT: usize = 16;

fn main() -> Res<()> {
    // `cargo bench` passes `--bench`; repositories are the arguments that are not flags.
    let args: Vec<PathBuf> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).map(PathBuf::from).collect();
    let repos = if args.is_empty() {
        let registry = registry_src()?;
        vec![
            prepare(&Path::new(BENCH_DIR).join("tokio"), &registry, &["tokio"], 0)?,
            prepare(&Path::new(BENCH_DIR).join("crates"), &registry, BIG_CRATES, MIN_BIG_FILES)?,
        ]
    } else {
        args
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let version = run_git(Path::new("."), &["--version"])?;
    println!("{}; {cores} cores; median of {RUNS} runs after {WARMUP} warm-up, interleaved\n", version.trim());
    println!(
        "| repository | files | ours wall (ms) | git wall (ms) | ours / git wall | ours CPU (ms) | git CPU (ms) \
         | ours / git CPU | git_worktree_add wall (ms) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    // Deleting a run's worktrees before the next repository's would slow that one down
    // (see above): the temporary directories all go at the end.
    let mut keep = Vec::new();
    for repo in &repos {
        keep.push(bench_repo(repo)?);
    }
    println!("\n| repository | {FAN_OUT} worktrees one after another (ms) | {FAN_OUT} at once (ms) | speed-up |");
    println!("| --- | ---: | ---: | ---: |");
    for repo in &repos {
        keep.push(bench_fan_out(repo)?);
    }
    Ok(())
}

fn bench_repo(repo: &Path) -> Res<tempfile::TempDir> {
    let files = run_git(repo, &["ls-tree", "-r", "--name-only", "HEAD"])?.lines().count();
    let work = tempfile::Builder::new().prefix("orch-worktree-bench-").tempdir()?;
    let clone = git::RunClone::create_blocking(repo, &work.path().join("run"), "HEAD", "bench")?;
    let base = clone.base().to_string();
    let checkouts = work.path().join("run").join("worktrees");
    let lib = git2::Repository::open_bare(clone.git_dir())?;
    let base_commit = lib.find_commit(clone.base())?;

    let (mut ours, mut cli, mut libgit2) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ours_cpu, mut cli_cpu) = (Vec::new(), Vec::new());
    for i in 0..WARMUP + RUNS {
        // Ours.
        let (start, cpu) = (Instant::now(), cpu_time(UsageWho::RUSAGE_THREAD)?);
        let wt = clone.add_worktree_blocking(&format!("ours-{i}"))?;
        ours.push(start.elapsed());
        ours_cpu.push(cpu_time(UsageWho::RUSAGE_THREAD)?.saturating_sub(cpu));
        if i == 0 {
            check_worktree(wt.path(), files)?;
        }

        // `git worktree add`, in the same run clone.
        let name = format!("git-{i}");
        let path = checkouts.join(&name);
        let branch = format!("orch/bench/{name}");
        let path_text = path.to_str().ok_or("non-UTF-8 path")?;
        let (start, cpu) = (Instant::now(), cpu_time(UsageWho::RUSAGE_CHILDREN)?);
        run_git(clone.git_dir(), &["worktree", "add", "-q", "-b", &branch, path_text, &base])?;
        cli.push(start.elapsed());
        cli_cpu.push(cpu_time(UsageWho::RUSAGE_CHILDREN)?.saturating_sub(cpu));
        if i == 0 {
            check_worktree(&path, files)?;
        }

        // libgit2's `git_worktree_add`, for reference.
        let name = format!("lib-{i}");
        let path = checkouts.join(&name);
        let start = Instant::now();
        let branch = lib.branch(&format!("orch/bench/{name}"), &base_commit, false)?;
        let mut options = git2::WorktreeAddOptions::new();
        options.reference(Some(branch.get()));
        lib.worktree(&name, &path, Some(&options))?;
        libgit2.push(start.elapsed());
        if i == 0 {
            check_worktree(&path, files)?;
        }
    }
    let (ours, cli, libgit2) = (median(&ours[WARMUP..]), median(&cli[WARMUP..]), median(&libgit2[WARMUP..]));
    let (ours_cpu, cli_cpu) = (median(&ours_cpu[WARMUP..]), median(&cli_cpu[WARMUP..]));
    println!(
        "| {} | {files} | {:.1} | {:.1} | {:.2}× | {:.1} | {:.1} | {:.2}× | {:.1} |",
        repo.display(),
        ms(ours),
        ms(cli),
        ours.as_secs_f64() / cli.as_secs_f64(),
        ms(ours_cpu),
        ms(cli_cpu),
        ours_cpu.as_secs_f64() / cli_cpu.as_secs_f64(),
        ms(libgit2)
    );
    Ok(work)
}

/// Wall time of [`FAN_OUT`] worktrees made one after another, then of as many made at
/// once through the async API (tokio's blocking pool), as `orch run` starts its agents.
fn bench_fan_out(repo: &Path) -> Res<tempfile::TempDir> {
    let work = tempfile::Builder::new().prefix("orch-worktree-bench-").tempdir()?;
    let clone = git::RunClone::create_blocking(repo, &work.path().join("run"), "HEAD", "bench")?;
    let start = Instant::now();
    for i in 0..FAN_OUT {
        clone.add_worktree_blocking(&format!("seq-{i}"))?;
    }
    let sequential = start.elapsed();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let start = Instant::now();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..FAN_OUT)
            .map(|i| {
                let clone = clone.clone();
                tokio::spawn(async move { clone.add_worktree(&format!("par-{i}")).await })
            })
            .collect();
        for task in tasks {
            task.await??;
        }
        Ok::<_, Box<dyn Error>>(())
    })?;
    let parallel = start.elapsed();
    println!(
        "| {} | {:.0} | {:.0} | {:.2}× |",
        repo.display(),
        ms(sequential),
        ms(parallel),
        sequential.as_secs_f64() / parallel.as_secs_f64()
    );
    Ok(work)
}

/// The worktree has every file of the base and git sees it clean (so the index written
/// with the checkout has valid stat data).
fn check_worktree(path: &Path, files: usize) -> Res<()> {
    let tracked = run_git(path, &["ls-files"])?.lines().count();
    let status = run_git(path, &["status", "--porcelain", "--untracked-files=all"])?;
    if tracked != files || !status.is_empty() {
        return Err(format!("{}: {tracked} of {files} files, status:\n{status}", path.display()).into());
    }
    Ok(())
}

fn median(times: &[Duration]) -> Duration {
    let mut times = times.to_vec();
    times.sort();
    let n = times.len();
    match n {
        0 => Duration::ZERO,
        _ => (times[(n - 1) / 2] + times[n / 2]) / 2,
    }
}

/// User + system CPU time used so far by `who`.
fn cpu_time(who: UsageWho) -> Res<Duration> {
    let usage = getrusage(who)?;
    let micros = usage.user_time().num_microseconds() + usage.system_time().num_microseconds();
    Ok(Duration::from_micros(u64::try_from(micros)?))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Runs git with neither system nor global config; its stdout, or an error.
fn run_git(dir: &Path, args: &[&str]) -> Res<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@localhost")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@localhost")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run git ({e})"))?;
    if !out.status.success() {
        return Err(format!("git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// Makes `dest` a one-commit, packed repository of the newest versions of `crates` in
/// the registry (adding crates after the first until `min_files`), or reuses it.
fn prepare(dest: &Path, registry: &Path, crates: &[&str], min_files: usize) -> Res<PathBuf> {
    if dest.join(".git").join(MARKER).is_file() {
        return Ok(dest.to_path_buf());
    }
    if dest.exists() {
        std::fs::remove_dir_all(dest)?;
    }
    std::fs::create_dir_all(dest)?;
    let mut copied = Vec::new();
    let mut files = 0;
    for (i, name) in crates.iter().enumerate() {
        if i > 0 && files >= min_files {
            break;
        }
        let Some(src) = newest_crate(registry, name)? else {
            eprintln!("note: crate {name} not found in {}", registry.display());
            continue;
        };
        let Some(dir_name) = src.file_name() else { continue };
        // A single crate is the tree itself; several are side by side.
        let target = if crates.len() == 1 { dest.to_path_buf() } else { dest.join(dir_name) };
        copy_dir(&src, &target)?;
        files += count_files(&target)?;
        copied.push(dir_name.to_string_lossy().into_owned());
    }
    if files < min_files.max(1) {
        return Err(format!("only {files} files found for {}; pass a repository path", dest.display()).into());
    }
    run_git(dest, &["init", "-q", "-b", "main"])?;
    run_git(dest, &["add", "-A"])?;
    run_git(dest, &["commit", "-q", "-m", &format!("bench tree: {}", copied.join(", "))])?;
    run_git(dest, &["gc", "-q"])?;
    std::fs::write(dest.join(".git").join(MARKER), copied.join("\n") + "\n")?;
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
