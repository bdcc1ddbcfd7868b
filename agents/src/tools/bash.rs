//! `Bash`: runs a shell command in the agent's worktree, inside the tool host.
//!
//! The command runs as `bash -c` (or `sh -c` where bash is missing) in its own process
//! group, with no stdin, and with Claude Code's environment variables
//! ([`CLAUDE_CODE_ENV`]). Both output streams are read concurrently into bounded buffers
//! (a head and a ring-buffer tail each), so endless output costs fixed memory. When the
//! command ends or is cancelled, the whole process group is killed, so background
//! children do not outlive the call. A command still running at its timeout is moved to
//! the background shells ([`super::background`]) instead, as Claude Code does, unless
//! they are full: then it is killed.
//!
//! The working directory carries over between calls, as in Claude Code: the shell gets
//! an `EXIT` trap that writes `pwd -P` to a file of its own in the temporary directory
//! (the sandbox's private tmp, which the command can write), and the next command
//! starts there ([`Session::shell_cwd`](super::Session::shell_cwd)). A directory outside
//! the worktree is not kept: the next command starts at the worktree root and the
//! result says so. The trap leaves the command's exit status as it was.
//!
//! Processes that leave the group (`setsid`, `setpgid`) are not reached by the group
//! kill. For those, the tool host installs an orphan hook ([`set_orphan_hook`]; orch's
//! tool host passes `orch_sandbox::reaper::kill_orphans`, which kills every descendant
//! of the host, a child subreaper, outside the given process groups). It is called when
//! each command ends, times out or is cancelled, with the process groups of the
//! commands still running, which it spares. Without a hook (tests, other embedders)
//! this code only stops waiting for pipes the escaped processes hold open.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::bash_readonly;
use super::{Session, Tool, ToolContext, ToolError};

// This file is declared with a `#[path]` (see build.rs), so its own submodules are too.
#[path = "bash/spawn.rs"]
mod spawn;
pub(super) use spawn::Child;

/// The timeout when the call gives none.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The longest timeout a call may ask for.
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// How long a timed-out command gets between SIGTERM and SIGKILL.
pub const TERM_GRACE: Duration = Duration::from_millis(200);
/// How long a cancelled command (the run was interrupted) gets between SIGTERM and
/// SIGKILL, so it can clean up, as a signal forwarded by a CI runner allows.
pub const CANCEL_GRACE: Duration = Duration::from_secs(1);
/// How long to keep reading pipes after the command has ended and its group was
/// killed; a process that escaped the group may hold them open forever.
pub const DRAIN_GRACE: Duration = Duration::from_millis(100);
/// How long to wait for the shell to be reaped after SIGKILL before giving up on it
/// (dropping the child kills it and reaps it in the background).
const REAP_WAIT: Duration = Duration::from_millis(500);
/// The most output characters (stdout and stderr together) a result shows.
pub const MAX_OUTPUT_CHARS: usize = 30_000;
/// Characters kept from the start of each stream while reading.
const HEAD_CHARS: usize = MAX_OUTPUT_CHARS / 2;
/// Characters kept from the end of each stream while reading.
const TAIL_CHARS: usize = MAX_OUTPUT_CHARS - HEAD_CHARS;
const READ_CHUNK: usize = 64 * 1024;
const STDERR_MARKER: &str = "--- stderr ---";

/// The environment Claude Code gives its `Bash` commands and hook commands, set over
/// the tool host's: scripts and hooks test `CLAUDECODE`, and `GIT_EDITOR=true` keeps
/// `git commit`, `git rebase` and `git merge` from waiting on an editor nobody sees.
pub const CLAUDE_CODE_ENV: &[(&str, &str)] =
    &[("CLAUDECODE", "1"), ("CLAUDE_CODE_ENTRYPOINT", "sdk-cli"), ("GIT_EDITOR", "true")];

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashInput {
    /// The command line, run with `bash -c` in the working directory.
    pub command: String,
    /// Timeout in milliseconds (default 120000, at most 600000). A command still
    /// running then is moved to the background (see BashOutput and KillShell).
    #[serde(default)]
    pub timeout: Option<u64>,
    /// A few words saying what the command does, e.g. "Run the unit tests".
    #[serde(default)]
    pub description: Option<String>,
    /// Run the command in the background and return at once with a shell id; read its
    /// output with BashOutput and stop it with KillShell.
    #[serde(default)]
    pub run_in_background: Option<bool>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Bash;

#[async_trait]
impl Tool for Bash {
    type Input = BashInput;
    const NAME: &'static str = "Bash";

    fn description(&self) -> &'static str {
        "Run a shell command with bash in your working directory (the repository worktree) and \
         get back its output: stdout, then stderr after a '--- stderr ---' line. Use it for \
         builds, tests, git and other programs. For files, use the dedicated tools instead: \
         Read to look at a file (not cat/head/tail), Grep to search contents (not grep/rg), \
         Glob to find files by name (not find/ls -R), Edit and Write to change files (not \
         sed, awk or echo redirections).\n\
         This runs unattended in CI: there is no terminal, stdin is empty and nobody can \
         answer a prompt, so never start anything interactive (editors, pagers, `git rebase \
         -i`, `git commit` without -m, password or confirmation prompts); pass flags such as \
         --yes or --no-pager where a tool might ask.\n\
         The working directory carries over: after `cd src`, the next command starts in \
         src (within the worktree; a command that ends outside it leaves the next one at the \
         worktree root); relative paths given to the other tools (Read, Edit, Glob, ...) stay \
         relative to the worktree root. Shell variables and functions do not carry over, so chain steps \
         that need them with &&. Quote paths that contain spaces.\n\
         A command still running after 120000 ms (2 minutes) by default is moved to the \
         background, not killed, and the result gives its shell id; set `timeout` in \
         milliseconds, up to 600000 (10 minutes), for long builds or test suites. When the \
         command ends, anything it left running in the background is killed; to keep a server \
         or a long build running while you do other work, set `run_in_background: true` \
         instead of adding `&`: the call returns at once with a shell id, BashOutput shows \
         its new output and status, KillShell stops it, and it ends with your session (the \
         timeout does not apply to it). A non-zero exit code is returned as an error that \
         includes the output. Output longer than 30000 characters is cut in the middle, so \
         narrow noisy commands (e.g. pipe through `tail -n 100` or grep for what you need)."
    }

    fn is_read_only(&self, input: &Self::Input) -> bool {
        bash_readonly::is_read_only(&input.command)
    }

    fn is_concurrency_safe(&self, input: &Self::Input) -> bool {
        bash_readonly::is_read_only(&input.command)
    }

    fn is_destructive(&self, input: &Self::Input) -> bool {
        !bash_readonly::is_read_only(&input.command)
    }

    fn validate(&self, input: &Self::Input) -> Result<(), String> {
        if input.command.trim().is_empty() {
            return Err("command is empty; give the shell command to run".into());
        }
        match input.timeout {
            Some(0) => Err("timeout must be at least 1 ms (it is in milliseconds)".into()),
            Some(t) if t > MAX_TIMEOUT_MS => {
                Err(format!("timeout {t} ms is over the maximum of {MAX_TIMEOUT_MS} ms (10 minutes)"))
            }
            _ => Ok(()),
        }
    }

    fn permission_subject(&self, input: &Self::Input) -> Option<String> {
        Some(input.command.clone())
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        Tool::validate(self, &input).map_err(ToolError)?;
        let timeout_ms = input.timeout.unwrap_or(DEFAULT_TIMEOUT_MS);
        tracing::debug!(command = %input.command, description = ?input.description, timeout_ms, "Bash");
        if input.run_in_background == Some(true) {
            if ctx.cancel.is_cancelled() {
                return Err(ToolError::new("Command cancelled before it started"));
            }
            let (dir, note) = shell_dir(&ctx.session);
            let started = super::background::start_for_bash(&input.command, &dir, ctx)?;
            return Ok(with_note(started, note));
        }
        let run = run(&input.command, ctx, Duration::from_millis(timeout_ms)).await?;
        let output = run.output();
        let note = run.cwd_note;
        let result = match run.end {
            End::Exited(status) => match (status.code(), status.signal()) {
                (Some(0), _) => Ok(if output.is_empty() { "(no output)".into() } else { output }),
                (Some(code), _) => Err(failure(format!("Command failed with exit code {code}"), &output)),
                (None, Some(sig)) => {
                    let core = if status.core_dumped() { " (core dumped)" } else { "" };
                    Err(failure(format!("Command was killed by signal {}{core}", signal_name(sig)), &output))
                }
                (None, None) => Err(failure(format!("Command ended abnormally ({status})"), &output)),
            },
            End::Backgrounded(id) => Ok(format!(
                "Command was still running after its timeout of {timeout_ms} ms, so it was moved to the \
                 background (not killed) with ID: {id}. Read its further output with BashOutput (bash_id: \
                 \"{id}\") and stop it with KillShell (shell_id: \"{id}\").\nOutput so far:\n{}",
                if output.is_empty() { "(no output)" } else { &output }
            )),
            End::TimedOut => Err(failure(
                format!(
                    "Command timed out after {timeout_ms} ms and was killed with its child processes, because \
                     {} background shells are already running (the most an agent may have) so it could not \
                     be moved to the background; stop one with KillShell to free a place",
                    super::background::MAX_SHELLS
                ),
                &output,
            )),
            End::Cancelled => Err(failure("Command cancelled; it and its child processes were killed".into(), &output)),
        };
        match result {
            Ok(text) => Ok(with_note(text, note)),
            Err(ToolError(text)) => Err(ToolError(with_note(text, note))),
        }
    }
}

fn with_note(text: String, note: Option<String>) -> String {
    match note {
        Some(note) => format!("{text}\n{note}"),
        None => text,
    }
}

/// Where the session's next command starts, and a note when that had to be reset to
/// the worktree root because the directory is gone.
pub(super) fn shell_dir(session: &Session) -> (PathBuf, Option<String>) {
    let dir = session.shell_cwd();
    if dir.as_path() == session.cwd() || std::fs::metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return (dir, None);
    }
    let root = session.cwd().to_path_buf();
    session.set_shell_cwd(root.clone());
    let note = format!(
        "(The shell's directory {} no longer exists, so the command ran in the worktree root {}.)",
        dir.display(),
        root.display()
    );
    (root, Some(note))
}

/// The file a command's shell writes its last directory to, removed when dropped.
#[derive(Debug)]
pub(super) struct CwdFile {
    path: PathBuf,
}

impl CwdFile {
    /// A fresh name in the temporary directory, or `None` where that directory's path
    /// cannot be quoted plainly in the trap.
    fn new() -> Option<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("orch-cwd-{}-{n}", std::process::id()));
        let plain = path.to_str().is_some_and(|p| !p.contains(['\'', '"', '$', '`', '\\', '\n']));
        plain.then_some(Self { path })
    }

    /// `command` with the trap that records where its shell ends, on the same line so
    /// that the shell's messages keep their line numbers.
    fn wrap(&self, command: &str) -> String {
        format!("trap 'pwd -P 2>/dev/null >| \"{}\"' EXIT; {command}", self.path.display())
    }

    /// Moves the session's shell to where the command ended; a note when that was
    /// outside the worktree and the shell was put back at its root.
    fn follow(&self, session: &Session) -> Option<String> {
        let text = std::fs::read_to_string(&self.path).ok()?;
        let ended = text.strip_suffix('\n').unwrap_or(&text);
        if ended.is_empty() {
            return None;
        }
        // Canonical, so that no `..` or link written into the file leads out of the
        // worktree by a path that only looks inside it. Gone already: nothing to follow.
        let ended = std::fs::canonicalize(ended).ok()?;
        let ended = ended.as_path();
        let root = session.cwd();
        let canonical_root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        match ended.strip_prefix(&canonical_root) {
            Ok(rel) => {
                session.set_shell_cwd(root.join(rel));
                None
            }
            Err(_) => {
                session.set_shell_cwd(root.to_path_buf());
                Some(format!(
                    "(The command ended in {}, outside the worktree; the next command starts at the worktree \
                     root {}.)",
                    ended.display(),
                    root.display()
                ))
            }
        }
    }
}

impl Drop for CwdFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn failure(headline: String, output: &str) -> ToolError {
    if output.is_empty() {
        ToolError(format!("{headline}\n(no output)"))
    } else {
        ToolError(format!("{headline}\n{output}"))
    }
}

fn signal_name(sig: i32) -> String {
    Signal::try_from(sig).map(|s| s.as_str().to_owned()).unwrap_or_else(|_| format!("{sig}"))
}

/// How the command ended.
#[derive(Debug)]
enum End {
    Exited(ExitStatus),
    /// Past its timeout, moved to the background shells under this id.
    Backgrounded(String),
    /// Past its timeout and killed (the background shells were full).
    TimedOut,
    Cancelled,
}

#[derive(Debug)]
struct Run {
    end: End,
    stdout: Capture,
    stderr: Capture,
    /// Said when the shell's directory was reset to the worktree root.
    cwd_note: Option<String>,
}

impl Run {
    /// Stdout, then stderr under a marker, within [`MAX_OUTPUT_CHARS`] in all.
    fn output(&self) -> String {
        let (out_budget, err_budget) = budgets(self.stdout.total, self.stderr.total);
        let stdout = self.stdout.render(out_budget);
        let stderr = self.stderr.render(err_budget);
        let stdout = stdout.trim_end_matches('\n');
        let stderr = stderr.trim_end_matches('\n');
        match (stdout.is_empty(), stderr.is_empty()) {
            (_, true) => stdout.to_owned(),
            (true, false) => format!("{STDERR_MARKER}\n{stderr}"),
            (false, false) => format!("{stdout}\n{STDERR_MARKER}\n{stderr}"),
        }
    }
}

/// Splits [`MAX_OUTPUT_CHARS`] between the two streams: each gets up to half, and what
/// one does not use goes to the other.
fn budgets(out: usize, err: usize) -> (usize, usize) {
    if out + err <= MAX_OUTPUT_CHARS {
        (out, err)
    } else if out <= HEAD_CHARS {
        (out, MAX_OUTPUT_CHARS - out)
    } else if err <= TAIL_CHARS {
        (MAX_OUTPUT_CHARS - err, err)
    } else {
        (HEAD_CHARS, TAIL_CHARS)
    }
}

/// One output stream, kept as its first [`HEAD_CHARS`] and last [`TAIL_CHARS`]
/// characters, decoded as UTF-8 (invalid bytes become U+FFFD) as it arrives.
struct Capture {
    decoder: encoding_rs::Decoder,
    head: String,
    head_chars: usize,
    tail: VecDeque<char>,
    /// Every character seen, kept or not.
    total: usize,
    finished: bool,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("head_chars", &self.head_chars).field("total", &self.total).finish()
    }
}

impl Capture {
    fn new() -> Self {
        Self {
            decoder: encoding_rs::UTF_8.new_decoder_without_bom_handling(),
            head: String::new(),
            head_chars: 0,
            tail: VecDeque::new(),
            total: 0,
            finished: false,
        }
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        self.decode(bytes, false);
    }

    /// Flushes a trailing incomplete UTF-8 sequence (as U+FFFD).
    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.decode(&[], true);
        }
    }

    fn decode(&mut self, bytes: &[u8], last: bool) {
        let Some(cap) = self.decoder.max_utf8_buffer_length(bytes.len()) else {
            let text = String::from_utf8_lossy(bytes).into_owned();
            self.push_str(&text);
            return;
        };
        let mut text = String::with_capacity(cap);
        let _ = self.decoder.decode_to_string(bytes, &mut text, last);
        self.push_str(&text);
    }

    fn push_str(&mut self, text: &str) {
        let mut rest = text;
        if self.head_chars < HEAD_CHARS {
            let room = HEAD_CHARS - self.head_chars;
            let split = rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i);
            let (into_head, after) = rest.split_at(split);
            let n = into_head.chars().count();
            self.head.push_str(into_head);
            self.head_chars += n;
            self.total += n;
            rest = after;
        }
        if rest.is_empty() {
            return;
        }
        let n = rest.chars().count();
        self.total += n;
        if n >= TAIL_CHARS {
            self.tail.clear();
            self.tail.extend(rest.chars().skip(n - TAIL_CHARS));
        } else {
            let overflow = (self.tail.len() + n).saturating_sub(TAIL_CHARS);
            self.tail.drain(..overflow);
            self.tail.extend(rest.chars());
        }
    }

    /// The stream in at most `budget` characters (plus a note): cut in the middle when
    /// longer.
    fn render(&self, budget: usize) -> String {
        let tail: String = self.tail.iter().collect();
        if self.total <= budget {
            return self.head.clone() + &tail;
        }
        let budget = budget.min(HEAD_CHARS + TAIL_CHARS);
        let keep_head = budget - budget / 2;
        let keep_tail = budget / 2;
        // Everything seen is still here when the stream fit in head and tail.
        let whole;
        let (start_from, end_from): (&str, &str) = if self.total <= HEAD_CHARS + TAIL_CHARS {
            whole = self.head.clone() + &tail;
            (&whole, &whole)
        } else {
            (&self.head, &tail)
        };
        let start: String = start_from.chars().take(keep_head).collect();
        let end_len = end_from.chars().count();
        let end: String = end_from.chars().skip(end_len.saturating_sub(keep_tail)).collect();
        let cut = self.total - keep_head - keep_tail;
        let unit = if cut == 1 { "character" } else { "characters" };
        format!("{start}\n\n[... {cut} {unit} cut from the middle ...]\n\n{end}")
    }
}

/// Called with the process groups of the commands still running whenever a command
/// ends; kills whatever else the host's commands left behind. Set once per process.
static ORPHAN_HOOK: std::sync::OnceLock<fn(&[i32]) -> usize> = std::sync::OnceLock::new();
/// The process groups of the commands running now.
static RUNNING_GROUPS: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// Installs the orphan hook for this process (the first call wins). See the module doc.
pub fn set_orphan_hook(hook: fn(&[i32]) -> usize) {
    let _ = ORPHAN_HOOK.set(hook);
}

/// Registers a running command's process group; when dropped (after the command ended
/// or was abandoned), unregisters it and runs the orphan hook for the others.
pub(super) struct Running {
    pgid: Option<i32>,
}

impl Running {
    pub(super) fn new() -> Self {
        Self { pgid: None }
    }

    pub(super) fn register(&mut self, pgid: Option<i32>) {
        if let Some(pgid) = pgid {
            RUNNING_GROUPS.lock().unwrap_or_else(|e| e.into_inner()).push(pgid);
            self.pgid = Some(pgid);
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let still_running = {
            let mut groups = RUNNING_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(pgid) = self.pgid
                && let Some(i) = groups.iter().position(|g| *g == pgid)
            {
                groups.swap_remove(i);
            }
            groups.clone()
        };
        if let Some(hook) = ORPHAN_HOOK.get() {
            let killed = hook(&still_running);
            if killed > 0 {
                tracing::debug!(killed, "Bash: killed processes left behind outside the command's group");
            }
        }
    }
}

/// Kills the command's process group when dropped, unless disarmed: covers the call
/// future being dropped half-way.
struct GroupGuard {
    pgid: Option<Pid>,
}

impl GroupGuard {
    fn signal(&self, sig: Signal) {
        if let Some(pgid) = self.pgid {
            // ESRCH (the group is gone) is the expected, fine outcome.
            let _ = killpg(pgid, sig);
        }
    }

    /// SIGKILLs the group and stops guarding it.
    fn kill_and_disarm(&mut self) {
        self.signal(Signal::SIGKILL);
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
    }
}

/// Set once `bash` was not found: this process then runs commands with `sh`.
static BASH_MISSING: AtomicBool = AtomicBool::new(false);

/// Runs in every command's child between `clone` and `exec`, in memory it shares with
/// this process ([`spawn`]): it may only make system calls (no allocation, no locks) and
/// returns OS errors only. orch's tool host sets
/// `orch_sandbox::scope::enter_command_domain`, so a command cannot signal its host.
/// Set once per process.
static SPAWN_HOOK: std::sync::OnceLock<spawn::Hook> = std::sync::OnceLock::new();

/// Installs the spawn hook for this process (the first call wins).
pub fn set_spawn_hook(hook: spawn::Hook) {
    let _ = SPAWN_HOOK.set(hook);
}

fn spawn(shell: &str, command: &str, cwd: &Path) -> std::io::Result<Child> {
    spawn::spawn(shell, &["-c", command], cwd, CLAUDE_CODE_ENV, SPAWN_HOOK.get().copied())
}

/// Starts `command` in `cwd` with bash (or sh where bash is missing) in its own process
/// group.
pub(super) fn start(command: &str, cwd: &Path) -> Result<Child, ToolError> {
    if BASH_MISSING.load(Ordering::Relaxed) {
        spawn("sh", command, cwd)
    } else {
        match spawn("bash", command, cwd) {
            Err(e) if e.kind() == ErrorKind::NotFound => {
                // Not there (a busybox image): every later call goes straight to `sh`
                // instead of searching PATH for bash first.
                BASH_MISSING.store(true, Ordering::Relaxed);
                spawn("sh", command, cwd)
            }
            other => other,
        }
    }
    .map_err(|e| ToolError(format!("could not start the shell: {e}")))
}

/// Reads `pipe` into `capture` until it ends (`None`) or `stop` fires: then the pipe is
/// handed back unread from there, for the background shell that takes the command over.
async fn read_into(
    mut pipe: pipe::Receiver,
    capture: Arc<Mutex<Capture>>,
    stop: CancellationToken,
) -> Option<pipe::Receiver> {
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        // A pipe read is cancel safe: nothing is lost when `stop` wins.
        let read = tokio::select! {
            biased;
            _ = stop.cancelled() => None,
            read = pipe.read(&mut buf) => Some(read),
        };
        match read {
            None => return Some(pipe),
            Some(Ok(0)) => return None,
            Some(Ok(n)) => capture.lock().unwrap_or_else(|e| e.into_inner()).push_bytes(&buf[..n]),
            Some(Err(e)) if e.kind() == ErrorKind::Interrupted => continue,
            Some(Err(_)) => return None,
        }
    }
}

async fn run(command: &str, ctx: &ToolContext, timeout: Duration) -> Result<Run, ToolError> {
    if ctx.cancel.is_cancelled() {
        return Err(ToolError::new("Command cancelled before it started"));
    }
    let root = ctx.session.cwd();
    // One `stat`, done in place: `tokio::fs` would hand it to a blocking thread and
    // back, two thread switches on every call for a call that does not block.
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(ToolError(format!("working directory {} is not a directory", root.display()))),
        Err(e) => return Err(ToolError(format!("working directory {} is not usable: {e}", root.display()))),
    }
    let (cwd, gone_note) = shell_dir(&ctx.session);
    let cwd_file = CwdFile::new();
    let wrapped = cwd_file.as_ref().map(|f| f.wrap(command));
    // Declared before `child`, so it drops last: the orphan hook runs after the group
    // kill and after the shell is reaped (or abandoned).
    let mut running = Running { pgid: None };
    let mut child = start(wrapped.as_deref().unwrap_or(command), &cwd)?;
    // Declared after `child`, so it drops first: the group is killed while the shell is
    // not yet reaped and its pid (the group id) cannot have been reused.
    let mut group = GroupGuard { pgid: child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw) };
    running.register(group.pgid.map(Pid::as_raw));

    let stdout = Arc::new(Mutex::new(Capture::new()));
    let stderr = Arc::new(Mutex::new(Capture::new()));
    let stop_reading = CancellationToken::new();
    let mut readers = JoinSet::new();
    if let Some(pipe) = child.stdout.take() {
        let read = read_into(pipe, stdout.clone(), stop_reading.clone());
        readers.spawn(async move { (false, read.await) });
    }
    if let Some(pipe) = child.stderr.take() {
        let read = read_into(pipe, stderr.clone(), stop_reading.clone());
        readers.spawn(async move { (true, read.await) });
    }

    let end = tokio::select! {
        biased;
        _ = ctx.cancel.cancelled() => End::Cancelled,
        status = child.wait() => match status {
            Ok(status) => End::Exited(status),
            Err(e) => {
                group.kill_and_disarm();
                return Err(ToolError(format!("could not wait for the command: {e}")));
            }
        },
        _ = tokio::time::sleep(timeout) => End::TimedOut,
    };

    let take = |c: &Arc<Mutex<Capture>>| {
        let mut guard = c.lock().unwrap_or_else(|e| e.into_inner());
        guard.finish();
        std::mem::replace(&mut *guard, Capture::new())
    };
    let shells = ctx.session.shells();
    if matches!(end, End::TimedOut) && shells.running() < super::background::MAX_SHELLS {
        // Still running: the background shells take it over, pipes and all, from where
        // this call stopped reading.
        stop_reading.cancel();
        let (mut out_pipe, mut err_pipe) = (None, None);
        while let Some(joined) = readers.join_next().await {
            match joined {
                Ok((false, pipe)) => out_pipe = pipe,
                Ok((true, pipe)) => err_pipe = pipe,
                Err(_) => {}
            }
        }
        group.pgid = None;
        let id = shells.adopt(command, child, out_pipe, err_pipe, running, cwd_file);
        return Ok(Run { end: End::Backgrounded(id), stdout: take(&stdout), stderr: take(&stderr), cwd_note: gone_note });
    }

    match end {
        // The shell is done; anything it left in its group goes now.
        End::Exited(_) => group.kill_and_disarm(),
        End::TimedOut => {
            group.signal(Signal::SIGTERM);
            let _ = tokio::time::timeout(TERM_GRACE, child.wait()).await;
            group.signal(Signal::SIGKILL);
            let _ = child.start_kill();
            let _ = tokio::time::timeout(REAP_WAIT, child.wait()).await;
            group.pgid = None;
        }
        End::Cancelled => {
            group.signal(Signal::SIGTERM);
            let _ = tokio::time::timeout(CANCEL_GRACE, child.wait()).await;
            group.signal(Signal::SIGKILL);
            let _ = child.start_kill();
            let _ = tokio::time::timeout(REAP_WAIT, child.wait()).await;
            group.pgid = None;
        }
        End::Backgrounded(_) => {}
    }

    // Writers are dead unless something escaped the group; read what is left, briefly.
    let drained = tokio::time::timeout(DRAIN_GRACE, async { while readers.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::debug!("Bash: output pipes still open after the command ended (a process left its group)");
        readers.abort_all();
    }
    drop(readers);

    // Only a shell that ended by itself said where it is; a killed one stays put.
    let cwd_note = match (&end, &cwd_file) {
        (End::Exited(_), Some(file)) => file.follow(&ctx.session),
        _ => None,
    };
    let cwd_note = match (gone_note, cwd_note) {
        (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
        (a, b) => a.or(b),
    };
    Ok(Run { end, stdout: take(&stdout), stderr: take(&stderr), cwd_note })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{DynTool, Session};
    use serde_json::json;
    use std::time::Instant;
    use tokio_util::sync::CancellationToken;

    fn ctx(dir: &std::path::Path) -> ToolContext {
        ToolContext { session: Arc::new(Session::new(dir)), cancel: CancellationToken::new() }
    }

    async fn bash(ctx: &ToolContext, input: serde_json::Value) -> Result<String, ToolError> {
        DynTool::validate(&Bash, &input).map_err(ToolError)?;
        DynTool::call(&Bash, input, ctx).await
    }

    /// Whether `pid` is a live (non-zombie) process.
    fn alive(pid: i32) -> bool {
        if nix::sys::signal::kill(Pid::from_raw(pid), None).is_err() {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the parenthesised command name.
            Ok(stat) => stat.rsplit_once(')').is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    async fn gone_soon(pid: i32) -> bool {
        for _ in 0..40 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// The first line of `text` that is a number.
    fn pid_in(text: &str) -> i32 {
        text.lines().find_map(|l| l.trim().parse().ok()).unwrap_or_else(|| panic!("no pid in {text:?}"))
    }

    #[tokio::test]
    async fn echoes_and_runs_in_the_session_dir() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        assert_eq!(bash(&ctx, json!({"command": "echo hello"})).await.unwrap(), "hello");
        let pwd = bash(&ctx, json!({"command": "pwd -P", "description": "Print the directory"})).await.unwrap();
        assert_eq!(std::path::Path::new(&pwd), dir.path().canonicalize().unwrap());
        assert_eq!(bash(&ctx, json!({"command": "true"})).await.unwrap(), "(no output)");
        // stdin is empty, not inherited.
        assert_eq!(bash(&ctx, json!({"command": "cat; echo done"})).await.unwrap(), "done");
    }

    #[tokio::test]
    async fn reports_exit_codes_signals_and_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let err = bash(&ctx, json!({"command": "echo out; echo err >&2; exit 3"})).await.unwrap_err().0;
        assert!(err.contains("exit code 3"), "{err}");
        assert!(err.contains("out\n--- stderr ---\nerr"), "{err}");
        let ok = bash(&ctx, json!({"command": "echo warn >&2"})).await.unwrap();
        assert_eq!(ok, "--- stderr ---\nwarn");
        assert!(!ok.contains("exit code"));
        let err = bash(&ctx, json!({"command": "kill -KILL $$"})).await.unwrap_err().0;
        assert!(err.contains("signal SIGKILL"), "{err}");
    }

    #[tokio::test]
    async fn validates_input() {
        let v = |input| DynTool::validate(&Bash, &input);
        assert!(v(json!({"command": "  "})).unwrap_err().contains("empty"));
        assert!(v(json!({"command": "ls", "timeout": 0})).is_err());
        assert!(v(json!({"command": "ls", "timeout": 600_001})).unwrap_err().contains("600000"));
        assert!(v(json!({"command": "ls", "timeout": 600_000})).is_ok());
        assert!(v(json!({"command": "ls", "bogus": 1})).is_err());
        assert_eq!(DynTool::permission_subject(&Bash, &json!({"command": "rm -rf x"})).as_deref(), Some("rm -rf x"));
        let read = json!({"command": "git status && ls"});
        let write = json!({"command": "git diff && rm -rf x"});
        assert!(DynTool::is_read_only(&Bash, &read) && DynTool::is_concurrency_safe(&Bash, &read));
        assert!(!DynTool::is_destructive(&Bash, &read));
        assert!(!DynTool::is_read_only(&Bash, &write) && !DynTool::is_concurrency_safe(&Bash, &write));
        assert!(DynTool::is_destructive(&Bash, &write));
        let schema = DynTool::input_schema(&Bash).to_string();
        assert!(schema.contains("\"command\"") && schema.contains("\"timeout\"") && schema.contains("\"description\""));
    }

    /// Calls `BashOutput` on `id` until its status is `status`; everything it returned.
    async fn output_until(ctx: &ToolContext, id: &str, status: &str) -> String {
        let mut all = String::new();
        for _ in 0..100 {
            let out = DynTool::call(&super::super::background::BashOutput, json!({ "bash_id": id }), ctx).await.unwrap();
            all.push_str(&out);
            if out.contains(&format!("<status>{status}</status>")) {
                return all;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{id} never reached {status}: {all}");
    }

    #[tokio::test]
    async fn the_working_directory_carries_over_within_the_worktree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("src/deep")).unwrap();
        let ctx = ctx(&root);
        let pwd = |ctx: &ToolContext| {
            let ctx = ctx.clone();
            async move { bash(&ctx, json!({"command": "pwd"})).await.unwrap() }
        };
        assert_eq!(bash(&ctx, json!({"command": "cd src"})).await.unwrap(), "(no output)");
        assert_eq!(pwd(&ctx).await, root.join("src").display().to_string());
        // The exit code stays the command's, and the directory still follows.
        let err = bash(&ctx, json!({"command": "cd deep && exit 3"})).await.unwrap_err().0;
        assert!(err.starts_with("Command failed with exit code 3"), "{err}");
        assert_eq!(pwd(&ctx).await, root.join("src/deep").display().to_string());
        // A subshell's cd is its own; a background command starts where the shell is.
        bash(&ctx, json!({"command": "(cd ..)"})).await.unwrap();
        let started = bash(&ctx, json!({"command": "pwd", "run_in_background": true})).await.unwrap();
        assert!(started.contains("bash_1"), "{started}");
        let out = output_until(&ctx, "bash_1", "completed").await;
        assert!(out.contains(&root.join("src/deep").display().to_string()), "{out}");
        // A sub-agent's shell starts where its caller's is, and moves on its own.
        let child = ToolContext { session: Arc::new(ctx.session.scoped()), cancel: CancellationToken::new() };
        bash(&child, json!({"command": "cd .."})).await.unwrap();
        assert_eq!(pwd(&child).await, root.join("src").display().to_string());
        assert_eq!(pwd(&ctx).await, root.join("src/deep").display().to_string());
        // Leaving the worktree is not kept, and the model is told.
        let out = bash(&ctx, json!({"command": "cd /tmp && echo left"})).await.unwrap();
        let (first, note) = out.split_once('\n').unwrap();
        assert_eq!(first, "left");
        assert!(note.contains("outside the worktree") && note.contains(&root.display().to_string()), "{note}");
        assert_eq!(pwd(&ctx).await, root.display().to_string());
        let err = bash(&ctx, json!({"command": "cd ..; exit 4"})).await.unwrap_err().0;
        assert!(err.contains("exit code 4") && err.ends_with(&format!("root {}.)", root.display())), "{err}");
        assert_eq!(pwd(&ctx).await, root.display().to_string());
    }

    #[test]
    fn the_recorded_directory_is_checked_as_a_real_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        let session = Session::new(&root);
        let file = CwdFile { path: root.join("cwd-file") };
        // A `..` that only looks inside the worktree does not lead out of it.
        std::fs::write(&file.path, format!("{}/src/../..\n", root.display())).unwrap();
        let note = file.follow(&session).expect("a note");
        assert!(note.contains("outside the worktree"), "{note}");
        assert_eq!(session.shell_cwd(), root);
        std::fs::write(&file.path, format!("{}/src/.\n", root.display())).unwrap();
        assert_eq!(file.follow(&session), None);
        assert_eq!(session.shell_cwd(), root.join("src"));
        // A link inside that points outside is outside.
        std::os::unix::fs::symlink("/", root.join("up")).unwrap();
        std::fs::write(&file.path, format!("{}/up\n", root.display())).unwrap();
        assert!(file.follow(&session).is_some());
        assert_eq!(session.shell_cwd(), root);
        drop(file);
        assert!(!root.join("cwd-file").exists(), "the file goes with its guard");
    }

    #[tokio::test]
    async fn a_removed_directory_sends_the_shell_back_to_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ctx = ctx(&root);
        bash(&ctx, json!({"command": "mkdir gone && cd gone"})).await.unwrap();
        bash(&ctx, json!({"command": "rmdir \"$PWD\""})).await.unwrap();
        let out = bash(&ctx, json!({"command": "pwd"})).await.unwrap();
        let (pwd, note) = out.split_once('\n').unwrap();
        assert_eq!(pwd, root.display().to_string());
        assert!(note.contains("no longer exists"), "{note}");
    }

    #[tokio::test]
    async fn commands_get_claude_codes_environment() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let out =
            bash(&ctx, json!({"command": "echo \"$CLAUDECODE|$CLAUDE_CODE_ENTRYPOINT|$GIT_EDITOR\""})).await.unwrap();
        assert_eq!(out, "1|sdk-cli|true");
        // `git commit` without -m takes the message file as it is instead of opening an editor.
        if std::process::Command::new("git").arg("--version").output().is_ok() {
            let out = bash(
                &ctx,
                json!({"command": "git init -q . && git -c user.name=t -c user.email=t@t commit -q --allow-empty \
                                   --allow-empty-message && git log --oneline | wc -l"}),
            )
            .await
            .unwrap();
            assert_eq!(out.trim(), "1");
        }
    }

    #[tokio::test]
    async fn a_command_past_its_timeout_moves_to_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let started = Instant::now();
        let command = "echo before; sleep 0.6; echo after; exit 5";
        let out = bash(&ctx, json!({"command": command, "timeout": 200})).await.unwrap();
        assert!(started.elapsed() < Duration::from_millis(600), "took {:?}", started.elapsed());
        assert!(out.contains("timeout of 200 ms") && out.contains("ID: bash_1"), "{out}");
        assert!(out.contains("BashOutput") && out.contains("KillShell"), "{out}");
        assert!(out.ends_with("Output so far:\nbefore"), "{out}");
        // The rest of its output arrives through BashOutput, once, with its exit code.
        let all = output_until(&ctx, "bash_1", "failed").await;
        assert!(all.contains("after") && !all.contains("before"), "{all}");
        assert!(all.contains("<exit_code>5</exit_code>"), "{all}");
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group_when_the_background_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        for _ in 0..super::super::background::MAX_SHELLS {
            bash(&ctx, json!({"command": "sleep 60", "run_in_background": true})).await.unwrap();
        }
        let started = Instant::now();
        let err = bash(&ctx, json!({"command": "sleep 1000 & echo $!; sleep 30", "timeout": 300})).await.unwrap_err().0;
        assert!(started.elapsed() < Duration::from_millis(1500), "took {:?}", started.elapsed());
        assert!(err.contains("timed out after 300 ms") && err.contains("KillShell"), "{err}");
        let child = pid_in(&err);
        assert!(gone_soon(child).await, "background child {child} survived the timeout");
        // One that ignores SIGTERM gets SIGKILL after the grace.
        let started = Instant::now();
        let err = bash(&ctx, json!({"command": "trap '' TERM; echo $$; while :; do sleep 0.05; done", "timeout": 200}))
            .await
            .unwrap_err()
            .0;
        assert!(started.elapsed() < Duration::from_millis(1500), "took {:?}", started.elapsed());
        assert!(err.contains("timed out"), "{err}");
        assert!(gone_soon(pid_in(&err)).await);
        assert_eq!(ctx.session.shells().kill_all(), super::super::background::MAX_SHELLS);
    }

    #[tokio::test]
    async fn background_children_do_not_outlive_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let started = Instant::now();
        // The child keeps stdout open; the call must not wait for it.
        let out = bash(&ctx, json!({"command": "sleep 1000 & echo $!"})).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
        let child = pid_in(&out);
        assert!(gone_soon(child).await, "background child {child} survived");
    }

    #[tokio::test]
    async fn does_not_wait_for_pipes_held_by_escaped_processes() {
        if std::process::Command::new("setsid").arg("--version").output().is_err() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let started = Instant::now();
        // The `sh` leaves the group for a new session and keeps stdout open.
        let out = bash(&ctx, json!({"command": "setsid sh -c 'echo $$; exec sleep 1000' & sleep 0.2; echo started"}))
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
        assert!(out.ends_with("started"), "{out}");
        // The escaped process is the sandbox layer's to kill; the test cleans it up by pid.
        let escaped = pid_in(&out);
        assert!(alive(escaped), "the escaped process should still run (the group kill cannot reach it)");
        let _ = nix::sys::signal::kill(Pid::from_raw(escaped), Signal::SIGKILL);
        assert!(gone_soon(escaped).await);
    }

    #[tokio::test]
    async fn cancellation_returns_promptly_and_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let marker = dir.path().join("pid");
        let cancel = ctx.cancel.clone();
        let command = format!("sleep 1000 & echo $! > '{}'; sleep 1000", marker.display());
        let call = tokio::spawn({
            let ctx = ctx.clone();
            async move { bash(&ctx, json!({"command": command})).await }
        });
        let mut child = None;
        for _ in 0..100 {
            if let Ok(text) = std::fs::read_to_string(&marker)
                && let Ok(pid) = text.trim().parse::<i32>()
            {
                child = Some(pid);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let child = child.expect("the command wrote its child's pid");
        let started = Instant::now();
        cancel.cancel();
        let err = call.await.unwrap().unwrap_err().0;
        assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
        assert!(err.contains("cancelled"), "{err}");
        assert!(gone_soon(child).await, "background child {child} survived cancellation");
    }

    #[tokio::test]
    async fn a_cancelled_command_gets_sigterm_then_sigkill_after_the_grace() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let marker = dir.path().join("ready");
        let cancel = ctx.cancel.clone();
        // Ignores SIGTERM: only the SIGKILL after the grace ends it.
        let command = format!("trap 'echo got-term' TERM; touch '{}'; while :; do sleep 0.05; done", marker.display());
        let call = tokio::spawn({
            let ctx = ctx.clone();
            async move { bash(&ctx, json!({"command": command})).await }
        });
        for _ in 0..100 {
            if marker.exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let started = Instant::now();
        cancel.cancel();
        let err = call.await.unwrap().unwrap_err().0;
        let took = started.elapsed();
        assert!(took >= CANCEL_GRACE && took < CANCEL_GRACE + Duration::from_secs(1), "took {took:?}");
        assert!(err.contains("got-term"), "the trap ran on SIGTERM first: {err}");
    }

    #[tokio::test]
    async fn endless_output_is_bounded_and_cut_in_the_middle() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let started = Instant::now();
        let err = bash(&ctx, json!({"command": "yes | head -c 3000000; exit 1"})).await.unwrap_err().0;
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        assert!(err.contains("exit code 1"), "{err:.200}");
        let note = err.find("characters cut from the middle ...]").expect("a cut note");
        let cut: usize = err[..note].rsplit("[... ").next().unwrap().trim().parse().unwrap();
        assert!(cut > 100_000, "only {cut} cut");
        assert!(err.chars().count() < MAX_OUTPUT_CHARS + 200, "{} chars", err.chars().count());
        assert!(err.ends_with("y\ny"), "{:?}", &err[err.len() - 10..]);
    }

    #[tokio::test]
    async fn truncates_to_exactly_30000_characters() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        // Exactly at the limit: untouched. (`head -c` counts bytes; all ASCII here.)
        let out = bash(&ctx, json!({"command": "yes x | tr -d '\\n' | head -c 30000"})).await.unwrap();
        assert_eq!(out.len(), 30_000);
        assert!(!out.contains("cut"));
        // One over: one character cut, 15000 kept on each side.
        let out =
            bash(&ctx, json!({"command": "printf a; yes x | tr -d '\\n' | head -c 29999; printf b"})).await.unwrap();
        let (start, rest) = out.split_once("\n\n[... 1 character cut from the middle ...]\n\n").unwrap();
        assert_eq!(start.len(), 15_000);
        assert!(start.starts_with('a'));
        assert_eq!(rest.len(), 15_000);
        assert!(rest.ends_with('b'));
        // Multi-byte characters are counted as characters, and stay whole.
        let out = bash(&ctx, json!({"command": "for i in $(seq 40000); do printf 'é'; done"})).await.unwrap();
        let (start, rest) = out.split_once("\n\n[... 10000 characters cut from the middle ...]\n\n").unwrap();
        assert_eq!((start.chars().count(), rest.chars().count()), (15_000, 15_000));
        assert!(start.chars().chain(rest.chars()).all(|c| c == 'é'));
    }

    #[test]
    fn shares_the_budget_between_streams() {
        assert_eq!(budgets(10, 20), (10, 20));
        assert_eq!(budgets(100_000, 200), (29_800, 200));
        assert_eq!(budgets(200, 100_000), (200, 29_800));
        assert_eq!(budgets(100_000, 100_000), (15_000, 15_000));
        let mut c = Capture::new();
        for _ in 0..1000 {
            c.push_bytes(&[b'a'; 1000]);
        }
        c.push_bytes("xyz".as_bytes());
        c.finish();
        assert_eq!(c.total, 1_000_003);
        assert_eq!((c.head.len(), c.tail.len()), (HEAD_CHARS, TAIL_CHARS));
        let shown = c.render(29_800);
        assert!(shown.contains("[... 970203 characters cut from the middle ...]"), "{:.100}", &shown[14_890..]);
        assert!(shown.ends_with("axyz"));
        // A multi-byte character split across reads is decoded whole.
        let mut c = Capture::new();
        c.push_bytes(&[0xc3]);
        c.push_bytes(&[0xa9, b'!', 0xff]);
        c.finish();
        assert_eq!(c.render(100), "é!\u{fffd}");
    }
}
