//! Tool hosts forked from a zygote (the fork server of `orch_sandbox::host::zygote`).
//!
//! `orch run` calls [`prefer`]; the first landlock (or unsandboxed) tool host it needs
//! then starts one `orch __tool-host-zygote` process, and every host after that is
//! forked from it instead of being a fresh `exec` of the orch binary: no dynamic
//! loading, no relocations, and the binary's relocated pages shared among all hosts
//! instead of private to each. The host itself does what an exec'd `orch __tool-host`
//! does ([`crate::host::host_main`]): same options, same environment (exactly
//! `policy.env`), same directory, same confinement, and it is the coordinator's child.
//!
//! Container hosts are unaffected (they run in their container), and so is `orch
//! exec`, which starts one host. `ORCH_TOOL_HOST_ZYGOTE=0` turns the zygote off. If it
//! cannot serve (it died, or a seccomp profile refuses `clone3`, as Docker's default
//! one does for orch running in a container), orch says so once under `-v` (it only
//! costs speed) and execs every later host.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use orch_sandbox::host::HostClient;
use orch_sandbox::host::zygote::{Spawned, ZYGOTE_FD, Zygote};
use orch_sandbox::policy::Policy;

use crate::error::Context as _;
use crate::options::HostOptions;

/// The hidden subcommand of the zygote process.
pub const SUBCOMMAND: &str = "__tool-host-zygote";

/// Turns the zygote off when set to `0`.
pub const ENV: &str = "ORCH_TOOL_HOST_ZYGOTE";

enum State {
    Off,
    Wanted,
    Running(Arc<Zygote>),
}

static STATE: Mutex<State> = Mutex::new(State::Off);

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Lets this process's later tool hosts start from a zygote (unless [`ENV`] is `0`).
pub fn prefer() {
    if std::env::var_os(ENV).is_some_and(|v| v == "0") {
        return;
    }
    let mut state = state();
    if matches!(*state, State::Off) {
        *state = State::Wanted;
    }
}

/// The running zygote, started if it is wanted and not yet running. Blocking.
fn current() -> Option<Arc<Zygote>> {
    let mut state = state();
    match &*state {
        State::Off => None,
        State::Running(zygote) => Some(Arc::clone(zygote)),
        State::Wanted => {
            let started = std::env::current_exe().and_then(|exe| Zygote::start(&exe, &[SUBCOMMAND]));
            match started {
                Ok(zygote) => {
                    let zygote = Arc::new(zygote);
                    tracing::debug!(pid = zygote.pid(), "tool host zygote started");
                    *state = State::Running(Arc::clone(&zygote));
                    Some(zygote)
                }
                Err(e) => {
                    tracing::info!("cannot start the tool host zygote ({e}); every tool host starts with exec");
                    *state = State::Off;
                    None
                }
            }
        }
    }
}

/// Stops the zygote, if one runs, and waits for it: called once the coordinator's last
/// tool host has stopped (see [`crate::reap::at_exit`]), so the zygote never outlives
/// the coordinator and leaves its tree. Later hosts would start with `exec`.
pub fn stop() {
    let running = std::mem::replace(&mut *state(), State::Off);
    if let State::Running(zygote) = running {
        let pid = zygote.pid();
        // The last reference: dropping it kills the zygote and reaps it. A host still
        // starting holds another, and drops it when it is done.
        drop(zygote);
        tracing::debug!(pid, "tool host zygote stopped");
    }
}

/// Stops using the zygote after it failed.
fn give_up(error: &std::io::Error) {
    let mut state = state();
    if matches!(*state, State::Running(_)) {
        tracing::info!("the tool host zygote failed ({error}); every later tool host starts with exec");
        *state = State::Off;
    }
}

/// Starts the tool host of `cwd`, `tools`, `policy` and `mcp` (as `orch __tool-host`
/// takes them) from the zygote, and waits for its `ready`; `None` when there is no
/// zygote to use: the caller execs the host then.
pub async fn spawn(
    cwd: &Path,
    tools: &[String],
    policy: &Policy,
    mcp: Option<&str>,
) -> crate::error::Result<Option<HostClient>> {
    if matches!(*state(), State::Off) {
        return Ok(None);
    }
    let options = HostOptions {
        cwd: cwd.to_path_buf(),
        tools: tools.to_vec(),
        policy: serde_json::to_string(policy)?,
        mcp: mcp.map(str::to_owned),
    };
    let payload = serde_json::to_string(&options)?;
    let env = policy.env.clone();
    let dir = cwd.to_path_buf();
    let forked = tokio::task::spawn_blocking(move || -> Option<std::io::Result<Spawned>> {
        let zygote = current()?;
        Some(zygote.spawn(&env, &dir, payload))
    })
    .await;
    let spawned = match forked {
        Ok(Some(Ok(spawned))) => spawned,
        Ok(None) => return Ok(None),
        Ok(Some(Err(e))) => {
            give_up(&e);
            return Ok(None);
        }
        Err(e) => {
            give_up(&std::io::Error::other(e));
            return Ok(None);
        }
    };
    let name = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "orch".into());
    let streams = spawned.into_streams(name).context("cannot watch a forked tool host")?;
    Ok(Some(HostClient::from_streams(streams).await?))
}

/// `orch __tool-host-zygote`: serves fork requests on fd 3 until the coordinator goes
/// away; each host runs [`crate::host::host_main`] with the options it was sent.
/// Returns the exit code. Call it while the process has one thread.
pub fn main() -> u8 {
    let code =
        orch_sandbox::host::zygote::serve(ZYGOTE_FD, |payload| match serde_json::from_str::<HostOptions>(&payload) {
            Ok(options) => i32::from(crate::host::host_main(options)),
            Err(e) => {
                tracing::error!("the tool host zygote sent malformed options: {e}");
                i32::from(crate::exit::Code::Infrastructure as u8)
            }
        });
    u8::try_from(code).unwrap_or(1)
}
