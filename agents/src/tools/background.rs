//! Background shells: `Bash` with `run_in_background`, and the `BashOutput` and
//! `KillShell` tools that read and stop them.
//!
//! A background command runs in the tool host like any `Bash` command (its own process
//! group, no stdin, in the shell's current directory), but the call returns at once
//! with an id (`bash_1`, ...). A `Bash` command that runs past its timeout is taken over
//! the same way ([`Shells::adopt`]). Its output
//! is kept until read, bounded: past [`MAX_UNREAD_CHARS`] per stream the oldest unread
//! output is dropped and counted. At most [`MAX_SHELLS`] run at once. Every background
//! shell of an agent (sub-agents included) is killed when the agent's session goes away
//! ([`Shells::kill_all`], run on drop and by the tool host's shutdown), so none outlives
//! the agent.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

use super::bash::{self, Child, CwdFile, Running};
use super::{Tool, ToolContext, ToolError};

/// Background shells running at once, per agent.
pub const MAX_SHELLS: usize = 16;
/// Unread characters kept per stream of a background shell.
pub const MAX_UNREAD_CHARS: usize = bash::MAX_OUTPUT_CHARS;
/// How long `KillShell` waits for the shell to be reaped before it answers.
const KILL_WAIT: Duration = Duration::from_secs(2);

/// How a background shell stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Running,
    /// Exited with this code.
    Exited(i32),
    /// Killed by a signal it did not get from `KillShell`.
    Signaled(String),
    /// Stopped by `KillShell` or the end of the agent.
    Killed,
    /// Waiting for it failed.
    Failed(String),
}

impl Status {
    fn name(&self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Exited(0) => "completed",
            Self::Exited(_) | Self::Signaled(_) | Self::Failed(_) => "failed",
            Self::Killed => "killed",
        }
    }
}

/// One stream's output that was not read yet.
#[derive(Debug, Default)]
struct Unread {
    text: String,
    /// Characters dropped unread because the buffer was full.
    dropped: usize,
    /// An incomplete UTF-8 sequence carried to the next chunk.
    partial: Vec<u8>,
}

impl Unread {
    fn push(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let valid = match std::str::from_utf8(&self.partial) {
            Ok(_) => self.partial.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.partial.len(),
        };
        let rest = self.partial.split_off(valid);
        let chunk = String::from_utf8_lossy(&self.partial).into_owned();
        self.partial = rest;
        self.text.push_str(&chunk);
        let chars = self.text.chars().count();
        if chars > MAX_UNREAD_CHARS {
            let cut = chars - MAX_UNREAD_CHARS;
            let at = self.text.char_indices().nth(cut).map_or(self.text.len(), |(i, _)| i);
            self.text.drain(..at);
            self.dropped += cut;
        }
    }

    fn take(&mut self) -> (String, usize) {
        (std::mem::take(&mut self.text), std::mem::take(&mut self.dropped))
    }
}

#[derive(Debug)]
struct State {
    stdout: Unread,
    stderr: Unread,
    status: Status,
}

#[derive(Debug)]
struct Shell {
    command: String,
    pgid: Option<i32>,
    state: Mutex<State>,
    /// Fires to stop the shell.
    kill: CancellationToken,
    /// Fires once the shell was reaped and its status is final.
    done: CancellationToken,
}

impl Shell {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn kill_group(&self) {
        if let Some(pgid) = self.pgid {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

/// The background shells of one agent and its sub-agents.
#[derive(Debug, Default)]
pub struct Shells {
    shells: Mutex<HashMap<String, Arc<Shell>>>,
    next: AtomicU64,
}

impl Shells {
    fn get(&self, id: &str) -> Option<Arc<Shell>> {
        self.shells.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned()
    }

    fn known(&self) -> String {
        let mut ids: Vec<String> = self.shells.lock().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect();
        ids.sort();
        if ids.is_empty() { "none".into() } else { ids.join(", ") }
    }

    /// The number of background shells still running.
    pub fn running(&self) -> usize {
        let shells = self.shells.lock().unwrap_or_else(|e| e.into_inner());
        shells.values().filter(|s| s.state().status == Status::Running).count()
    }

    /// Kills every background shell that still runs (its whole process group); returns
    /// how many. Synchronous, so it also works while the runtime shuts down.
    pub fn kill_all(&self) -> usize {
        let shells = self.shells.lock().unwrap_or_else(|e| e.into_inner());
        let mut killed = 0;
        for shell in shells.values() {
            let mut state = shell.state();
            if state.status == Status::Running {
                shell.kill_group();
                state.status = Status::Killed;
                shell.kill.cancel();
                killed += 1;
            }
        }
        killed
    }

    /// Starts `command` in the background in `cwd` and returns its id.
    pub(super) fn start(&self, command: &str, cwd: &Path) -> Result<String, ToolError> {
        if self.running() >= MAX_SHELLS {
            return Err(ToolError(format!(
                "{MAX_SHELLS} background shells are already running, the most an agent may have; \
                 stop one with KillShell or wait for one to finish"
            )));
        }
        let mut running = Running::new();
        let mut child = bash::start(command, cwd)?;
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        running.register(pgid);
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        Ok(self.adopt(command, child, stdout, stderr, running, None))
    }

    /// Takes over a started command (its shell, the pipes of its output not read yet,
    /// its registration among the running groups) as a background shell, and returns
    /// its id. `cwd_file` is removed when it ends. The caller checked [`MAX_SHELLS`].
    pub(super) fn adopt(
        &self,
        command: &str,
        mut child: Child,
        stdout: Option<pipe::Receiver>,
        stderr: Option<pipe::Receiver>,
        running: Running,
        cwd_file: Option<CwdFile>,
    ) -> String {
        let pgid = child.id().and_then(|id| i32::try_from(id).ok());
        let id = format!("bash_{}", self.next.fetch_add(1, Ordering::SeqCst) + 1);
        let shell = Arc::new(Shell {
            command: command.to_string(),
            pgid,
            state: Mutex::new(State { stdout: Unread::default(), stderr: Unread::default(), status: Status::Running }),
            kill: CancellationToken::new(),
            done: CancellationToken::new(),
        });
        self.shells.lock().unwrap_or_else(|e| e.into_inner()).insert(id.clone(), shell.clone());
        tokio::spawn(async move {
            let mut readers = tokio::task::JoinSet::new();
            if let Some(pipe) = stdout {
                readers.spawn(read_into(pipe, shell.clone(), false));
            }
            if let Some(pipe) = stderr {
                readers.spawn(read_into(pipe, shell.clone(), true));
            }
            let status = tokio::select! {
                status = child.wait() => Some(status),
                _ = shell.kill.cancelled() => None,
            };
            // The shell is done or stopped: nothing of its group stays.
            shell.kill_group();
            if status.is_none() {
                let _ = child.start_kill();
                let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
            }
            let _ =
                tokio::time::timeout(bash::DRAIN_GRACE, async { while readers.join_next().await.is_some() {} }).await;
            readers.abort_all();
            {
                let mut state = shell.state();
                if state.status == Status::Running {
                    state.status = match status {
                        None => Status::Killed,
                        Some(Ok(s)) => final_status(s),
                        Some(Err(e)) => Status::Failed(format!("could not wait for the command: {e}")),
                    };
                }
            }
            drop(running);
            drop(cwd_file);
            shell.done.cancel();
        });
        id
    }
}

impl Drop for Shells {
    fn drop(&mut self) {
        let killed = self.kill_all();
        if killed > 0 {
            tracing::debug!(killed, "killed background shells at the end of the agent");
        }
    }
}

fn final_status(status: ExitStatus) -> Status {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Status::Exited(code),
        (None, Some(sig)) => {
            Status::Signaled(Signal::try_from(sig).map(|s| s.as_str().to_owned()).unwrap_or_else(|_| sig.to_string()))
        }
        (None, None) => Status::Failed(format!("ended abnormally ({status})")),
    }
}

async fn read_into(mut pipe: impl AsyncRead + Unpin, shell: Arc<Shell>, stderr: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                let mut state = shell.state();
                let stream = if stderr { &mut state.stderr } else { &mut state.stdout };
                stream.push(&buf[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashOutputInput {
    /// The id of the background shell, as the Bash call that started it returned.
    pub bash_id: String,
    /// Optional regular expression: only output lines matching it are returned (the
    /// others are consumed too and will not be shown again).
    #[serde(default)]
    pub filter: Option<String>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct BashOutput;

#[async_trait]
impl Tool for BashOutput {
    type Input = BashOutputInput;
    const NAME: &'static str = "BashOutput";

    fn description(&self) -> &'static str {
        "Get what a background shell (started by Bash with run_in_background) printed since \
         you last asked, and whether it is still running: its status (running, completed, \
         failed or killed), its exit code once it ended, then its new stdout and stderr. \
         Each output line is returned once. With `filter` (a regular expression) only the \
         matching lines are shown; the others are consumed all the same. Use it to watch a \
         long build or server without blocking on it."
    }

    fn is_read_only(&self, _input: &Self::Input) -> bool {
        true
    }

    fn is_concurrency_safe(&self, _input: &Self::Input) -> bool {
        true
    }

    fn is_destructive(&self, _input: &Self::Input) -> bool {
        false
    }

    fn validate(&self, input: &Self::Input) -> Result<(), String> {
        if let Some(filter) = &input.filter {
            regex::Regex::new(filter).map_err(|e| format!("filter is not a valid regular expression: {e}"))?;
        }
        Ok(())
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        let filter = match &input.filter {
            Some(f) => Some(
                regex::Regex::new(f)
                    .map_err(|e| ToolError(format!("filter is not a valid regular expression: {e}")))?,
            ),
            None => None,
        };
        let shells = ctx.session.shells();
        let shell = shells.get(&input.bash_id).ok_or_else(|| {
            ToolError(format!("no background shell has the id `{}`; the ids are: {}", input.bash_id, shells.known()))
        })?;
        let (status, (stdout, out_dropped), (stderr, err_dropped)) = {
            let mut state = shell.state();
            let status = state.status.clone();
            (status, state.stdout.take(), state.stderr.take())
        };
        let shown = |text: String| match &filter {
            None => text,
            Some(re) => text.lines().filter(|l| re.is_match(l)).map(|l| format!("{l}\n")).collect(),
        };
        let mut out = format!("<status>{}</status>\n", status.name());
        match &status {
            Status::Exited(code) => out.push_str(&format!("<exit_code>{code}</exit_code>\n")),
            Status::Signaled(sig) => out.push_str(&format!("<signal>{sig}</signal>\n")),
            Status::Failed(why) => out.push_str(&format!("<error>{why}</error>\n")),
            Status::Running | Status::Killed => {}
        }
        let mut any = false;
        for (tag, text, dropped) in [("stdout", shown(stdout), out_dropped), ("stderr", shown(stderr), err_dropped)] {
            if dropped > 0 {
                out.push_str(&format!(
                    "[{dropped} earlier characters of {tag} were dropped unread; read more often or filter]\n"
                ));
            }
            if !text.is_empty() {
                any = true;
                out.push_str(&format!("<{tag}>\n{}\n</{tag}>\n", text.trim_end_matches('\n')));
            }
        }
        if !any {
            out.push_str("(no new output)\n");
        }
        Ok(out)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillShellInput {
    /// The id of the background shell to stop.
    pub shell_id: String,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct KillShell;

#[async_trait]
impl Tool for KillShell {
    type Input = KillShellInput;
    const NAME: &'static str = "KillShell";

    fn description(&self) -> &'static str {
        "Stop a background shell started by Bash with run_in_background, with every process \
         it started. Give the id the Bash call returned. Output it printed before it was \
         stopped can still be read with BashOutput."
    }

    fn is_destructive(&self, _input: &Self::Input) -> bool {
        false
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        let shells = ctx.session.shells();
        let shell = shells.get(&input.shell_id).ok_or_else(|| {
            ToolError(format!("no background shell has the id `{}`; the ids are: {}", input.shell_id, shells.known()))
        })?;
        let status = shell.state().status.clone();
        if status != Status::Running {
            return Err(ToolError(format!(
                "background shell {} is not running (status: {}); nothing to stop",
                input.shell_id,
                status.name()
            )));
        }
        shell.kill.cancel();
        let _ = tokio::time::timeout(KILL_WAIT, shell.done.cancelled()).await;
        Ok(format!("Killed background shell {} ({})", input.shell_id, shell.command))
    }
}

/// Starts a background command for `Bash` in `cwd` and says how to follow it.
pub(super) fn start_for_bash(command: &str, cwd: &Path, ctx: &ToolContext) -> Result<String, ToolError> {
    let id = ctx.session.shells().start(command, cwd)?;
    Ok(format!(
        "Command running in the background with ID: {id}. Read its output with BashOutput \
         (bash_id: \"{id}\") and stop it with KillShell (shell_id: \"{id}\")."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::HostRequest;
    use crate::tools::bash::Bash;
    use crate::tools::host::HostTools;
    use crate::tools::{DynTool, Session, core_tools};
    use serde_json::{Value, json};

    fn ctx(dir: &std::path::Path) -> ToolContext {
        ToolContext { session: Arc::new(Session::new(dir)), cancel: CancellationToken::new() }
    }

    async fn call(tool: &dyn DynTool, ctx: &ToolContext, input: Value) -> Result<String, ToolError> {
        tool.validate(&input).map_err(ToolError)?;
        tool.call(input, ctx).await
    }

    fn id_in(text: &str) -> String {
        text.split_whitespace().find(|w| w.starts_with("bash_")).unwrap().trim_end_matches('.').to_string()
    }

    fn alive(pid: i32) -> bool {
        if nix::sys::signal::kill(Pid::from_raw(pid), None).is_err() {
            return false;
        }
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.rsplit_once(')').is_none_or(|(_, r)| !r.trim_start().starts_with('Z')))
            .unwrap_or(false)
    }

    async fn poll_until(ctx: &ToolContext, id: &str, status: &str) -> String {
        let mut all = String::new();
        for _ in 0..100 {
            let out = call(&BashOutput, ctx, json!({ "bash_id": id })).await.unwrap();
            all.push_str(&out);
            if out.contains(&format!("<status>{status}</status>")) {
                return all;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{id} never reached {status}: {all}");
    }

    async fn pid_from(ctx: &ToolContext, id: &str) -> i32 {
        for _ in 0..100 {
            let out = call(&BashOutput, ctx, json!({ "bash_id": id })).await.unwrap();
            if let Some(pid) = out.lines().find_map(|l| l.trim().parse::<i32>().ok()) {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no pid from {id}");
    }

    async fn gone_soon(pid: i32) -> bool {
        for _ in 0..60 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    #[tokio::test]
    async fn runs_in_the_background_and_returns_new_output_once() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let started = call(
            &Bash,
            &ctx,
            json!({ "command": "echo one; sleep 0.3; echo two; echo err >&2; exit 3", "description": "Print", "run_in_background": true }),
        )
        .await
        .unwrap();
        let id = id_in(&started);
        assert_eq!(id, "bash_1");
        let all = poll_until(&ctx, &id, "failed").await;
        assert!(all.contains("<exit_code>3</exit_code>"), "{all}");
        assert_eq!(all.matches("one").count(), 1, "output is returned once: {all}");
        assert_eq!(all.matches("two").count(), 1, "{all}");
        assert!(all.contains("<stderr>\nerr\n</stderr>"), "{all}");
        let again = call(&BashOutput, &ctx, json!({ "bash_id": id })).await.unwrap();
        assert!(again.contains("(no new output)"), "{again}");
    }

    #[tokio::test]
    async fn the_filter_keeps_matching_lines() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let id = id_in(
            &call(
                &Bash,
                &ctx,
                json!({ "command": "printf 'ok 1\\nERROR a\\nok 2\\nERROR b\\n'", "run_in_background": true }),
            )
            .await
            .unwrap(),
        );
        let _ = poll_until(&ctx, &id, "completed").await;
        // The poll above consumed the output; start another to test the filter on it.
        let id = id_in(
            &call(&Bash, &ctx, json!({ "command": "printf 'ok 1\\nERROR a\\nok 2\\nERROR b\\n'; sleep 0.2", "run_in_background": true }))
                .await
                .unwrap(),
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        let out = call(&BashOutput, &ctx, json!({ "bash_id": id, "filter": "^ERROR" })).await.unwrap();
        assert!(out.contains("ERROR a\nERROR b"), "{out}");
        assert!(!out.contains("ok 1"), "{out}");
        assert!(DynTool::validate(&BashOutput, &json!({ "bash_id": id, "filter": "(" })).is_err());
        let err = call(&BashOutput, &ctx, json!({ "bash_id": "bash_99" })).await.unwrap_err();
        assert!(err.0.contains("bash_1, bash_2"), "{err}");
    }

    #[tokio::test]
    async fn kill_shell_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let id = id_in(
            &call(&Bash, &ctx, json!({ "command": "sleep 60 & echo $!; wait", "run_in_background": true }))
                .await
                .unwrap(),
        );
        let pid = pid_from(&ctx, &id).await;
        assert!(alive(pid));
        let out = call(&KillShell, &ctx, json!({ "shell_id": id })).await.unwrap();
        assert!(out.contains("Killed background shell bash_1"), "{out}");
        assert!(gone_soon(pid).await, "the background child {pid} survived KillShell");
        let status = call(&BashOutput, &ctx, json!({ "bash_id": id })).await.unwrap();
        assert!(status.contains("<status>killed</status>"), "{status}");
        let err = call(&KillShell, &ctx, json!({ "shell_id": id })).await.unwrap_err();
        assert!(err.0.contains("not running"), "{err}");
    }

    #[tokio::test]
    async fn no_background_process_survives_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let session = Arc::new(Session::new(dir.path()));
        let host = HostTools::new(core_tools(), session.clone());
        let mut pids = Vec::new();
        for _ in 0..2 {
            let out = host
                .run(
                    HostRequest::tool(
                        "Bash",
                        json!({ "command": "sleep 60 & echo $!; wait", "run_in_background": true }),
                    ),
                    CancellationToken::new(),
                )
                .await;
            assert!(!out.is_error, "{}", out.content);
        }
        let ctx = ToolContext { session: session.clone(), cancel: CancellationToken::new() };
        for id in ["bash_1", "bash_2"] {
            pids.push(pid_from(&ctx, id).await);
        }
        assert!(pids.iter().all(|p| alive(*p)));
        drop(ctx);
        assert_eq!(host.shutdown(), 2);
        for pid in pids {
            assert!(gone_soon(pid).await, "background process {pid} outlived the agent");
        }
        // Dropping the last handle of a session kills what is left too.
        let session = Arc::new(Session::new(dir.path()));
        let ctx = ToolContext { session, cancel: CancellationToken::new() };
        let id = id_in(
            &call(&Bash, &ctx, json!({ "command": "sleep 60 & echo $!; wait", "run_in_background": true }))
                .await
                .unwrap(),
        );
        let pid = pid_from(&ctx, &id).await;
        drop(ctx);
        assert!(gone_soon(pid).await, "background process {pid} outlived its session");
    }

    #[tokio::test]
    async fn unread_output_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let id = id_in(
            &call(&Bash, &ctx, json!({ "command": "yes 0123456789 | head -c 2000000", "run_in_background": true }))
                .await
                .unwrap(),
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        let all = poll_until(&ctx, &id, "completed").await;
        assert!(all.contains("earlier characters of stdout were dropped unread"), "{}", &all[..200]);
        assert!(all.len() < 3 * MAX_UNREAD_CHARS, "{}", all.len());
    }
}
