//! The `container` backend: one Docker container per agent, created through the Docker
//! Engine API (bollard), with the agent's tool host as the container's long-lived
//! process.
//!
//! # What a container looks like
//! [`ContainerHost::start`] creates and starts one container from `policy.image` and
//! returns it with a [`HostClient`] already past the host's `ready`:
//! - **Entry point**: the orch binary, bind-mounted read-only at [`ORCH_MOUNT`], run as
//!   `/orch/orch <host_args>`; the caller chooses the arguments (`__tool-host …`, or a
//!   one-shot mode of `orch sandbox run`). With [`ContainerOptions::init`] (the default)
//!   Docker's `docker-init` (tini) is PID 1 and reaps orphans the host's commands leave.
//! - **Protocol**: the tool host speaks over the container's attached stdin and stdout
//!   (`open_stdin`, `stdin_once`, no tty); stdout and stderr are demultiplexed, stderr
//!   lines go to `tracing` like a local host's. Commands are forked by the tool host
//!   inside the container, never run as Docker execs (an exec can be neither killed nor
//!   started cheaply).
//! - **Filesystem**: every writable root of the policy (worktree, private tmp and home)
//!   is bind-mounted read-write at the same path (the path as the policy writes it,
//!   since tools and the environment use that). Read roots under the system directories
//!   ([`SYSTEM_PREFIXES`]: `/usr`, `/etc`, `/lib`, `/opt`, …) are *not* bound: the image
//!   provides the system. Other read roots (a toolchain under the home, the main
//!   repository's `.git` of a worktree) are bound read-only at the same path, on top of
//!   a writable root that holds them (as root such a policy is refused, as by the
//!   landlock backend, since the root would be handed over). The image's root filesystem is read-only
//!   ([`ContainerOptions::readonly_rootfs`]), `/tmp` is a private tmpfs, the orch binary
//!   is read-only. Masked paths ([`Policy::masked`]) get empty read-only mounts on top
//!   (a tmpfs for a directory, `/dev/null` for a file).
//! - **User**: a non-root `uid:gid`: [`ContainerOptions::user`] if set; otherwise, when
//!   orch runs as root, `policy.uid` (gid = uid; see `crate::sandbox_uid`) or else
//!   `65534:65534` (nobody); when orch is not root, its own uid:gid, which owns the
//!   worktree anyway. Each writable root must be writable by that uid: when orch runs
//!   as root it hands a root that is not to the uid (`lchown -R`, not following symlinks
//!   nor leaving the file system; refused for `/`, system directories, the home
//!   directory, and a root that holds a read root) and [`ContainerHost::stop`] hands it
//!   back to its previous owner; when orch is not root, such a root is an error unless
//!   everyone may write to it.
//! - **Confinement**: `network_mode: none` under [`Network::None`] (only `lo`); memory
//!   (swap included) and pids limits from `policy.limits`, CPU time and file size as
//!   rlimits, a CPU count ([`ContainerOptions::cpus`]); `cap_drop: ALL`,
//!   `no-new-privileges`, a private IPC namespace; the environment is `policy.env` and
//!   nothing else (Docker adds `HOSTNAME`, and the image's own `ENV`, such as `PATH`,
//!   where the policy does not set it).
//! - **Labels**: [`LABEL_MANAGED`]`=true`, the run and agent ids, and the coordinator's
//!   pid, its start time and the machine's boot id, so leftovers can be told apart.
//!
//! # Lifetime
//! [`ContainerHost::stop`] force-removes the container; call it when the agent ends,
//! whether it succeeded, failed, timed out or was aborted. Dropping a [`ContainerHost`]
//! that was not stopped removes the container from a background thread (best effort: a
//! process that exits at once may not get that far; [`remove_own`] is the orderly way
//! at exit). The [`HostClient`] kills the container when it kills its host (dropped,
//! protocol broken, shutdown grace over). If the coordinator itself is killed, its attach
//! connection closes, the container's stdin closes with it (`stdin_once`) and the tool
//! host exits; the stopped container is left for [`reap_leftovers`], which removes
//! containers whose coordinator is gone and which `start` runs once per process.
//!
//! # Images
//! The orch binary runs from the host inside the image, so the image must be able to run
//! it. A normal build of orch is dynamically linked against glibc (loader, `libc`,
//! `libm`, `libgcc_s`): it runs in any image with a glibc at least as new as the one of
//! the machine that built it, e.g. `debian:bookworm` (glibc 2.36) or `ubuntu:24.04`
//! (2.39) for a binary built on bookworm; not in musl images such as Alpine nor in a bare
//! busybox. A statically linked orch (`RUSTFLAGS="-C target-feature=+crt-static" cargo
//! build --target x86_64-unknown-linux-gnu`) runs in any x86-64 image, busybox included.
//! `.ci/docker.sh` builds two test images without Docker Hub: `orch-test:busybox`,
//! busybox-static plus the building machine's glibc runtime, where both kinds run, and
//! `orch-test:bare`, busybox alone, where only the static build runs (both verified by
//! `tests/container.rs` and its `real_orch` benchmark; the Docker Hub images above are
//! not reachable from CI). When the host fails to start, the error names the binary's
//! ELF interpreter if it is dynamically linked and says what the image needs.
//!
//! # Engine
//! [`connect`] honours `DOCKER_HOST` (default `unix:///var/run/docker.sock`) and
//! negotiates the API version down to the engine's (tested with Engine 20.10, API 1.41).

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountBindOptions, MountBindOptionsPropagationEnum, MountTmpfsOptions,
    MountType, ResourcesUlimits,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures::StreamExt;
use tokio::io::AsyncWriteExt;

pub use bollard::Docker;

use crate::host::{HostClient, HostError, HostOptions, HostStreams};
use crate::policy::{Network, Policy};

/// Where the orch binary is mounted (read-only) in every container, and run from.
pub const ORCH_MOUNT: &str = "/orch/orch";
/// The label every container of this backend carries (`=true`).
pub const LABEL_MANAGED: &str = "orch.managed";
/// The run the container belongs to.
pub const LABEL_RUN: &str = "orch.run";
/// The agent the container belongs to.
pub const LABEL_AGENT: &str = "orch.agent";
/// The coordinator's pid.
pub const LABEL_PID: &str = "orch.pid";
/// The coordinator's start time (field 22 of `/proc/<pid>/stat`), against pid reuse.
pub const LABEL_PID_START: &str = "orch.pid_start";
/// The boot id of the coordinator's machine (`/proc/sys/kernel/random/boot_id`).
pub const LABEL_BOOT: &str = "orch.boot";
/// The uid and gid containers run as when nothing else decides: nobody.
pub const NOBODY: u32 = 65534;
/// Read roots under these are never bind-mounted: the image provides its own system.
pub const SYSTEM_PREFIXES: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix", "/snap", "/proc", "/sys",
    "/dev", "/run", "/var", "/boot",
];

/// How long removing a container may take before we give up on it.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(30);
/// Buffer between the attach stream and the protocol reader.
const PIPE_BYTES: usize = 256 * 1024;

/// Why a container host could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error(
        "cannot reach the Docker engine at {endpoint}: {message}; start dockerd (`.ci/docker.sh` installs and \
         starts one) or set DOCKER_HOST, and check that this user may use its socket"
    )]
    Engine { endpoint: String, message: String },
    #[error("the container backend needs an image: set the sandbox `image` in the workflow (e.g. debian:bookworm)")]
    NoImage,
    #[error(
        "the container image `{image}` is not on the Docker engine; pull it (`docker pull {image}`) or build it \
         (the test image `orch-test:busybox`: `.ci/docker.sh`), or set another image in the workflow"
    )]
    MissingImage { image: String },
    #[error("the orch binary `{}` cannot be mounted into the container: {message}", .path.display())]
    Binary { path: PathBuf, message: String },
    #[error("the writable root `{}` cannot be given to the container's uid {uid}: {message}", .path.display())]
    WriteRoot { path: PathBuf, uid: u32, message: String },
    #[error("the denied path `{}` cannot be masked in the container: {message}", .path.display())]
    Mask { path: PathBuf, message: String },
    #[error("refusing to run a container as root (uid 0); choose a non-root uid (ContainerOptions::user)")]
    RootUser,
    #[error("the Docker engine could not {action} container {name}: {message}")]
    Docker { action: &'static str, name: String, message: String },
    /// The tool host did not start; `error` names the container, `hint` may explain why.
    #[error("{error}{hint}")]
    Host { name: String, error: HostError, hint: String },
}

/// How a container is set up, beyond the [`Policy`].
#[derive(Debug, Clone)]
pub struct ContainerOptions {
    /// The run id, for the [`LABEL_RUN`] label and the container name.
    pub run: String,
    /// The agent id, for the [`LABEL_AGENT`] label and the container name.
    pub agent: String,
    /// The `uid:gid` to run as; `None` chooses as the module doc says.
    pub user: Option<(u32, u32)>,
    /// CPUs the container may use (Docker's `--cpus`); `None` leaves it unlimited.
    pub cpus: Option<f64>,
    /// Mount the image's root filesystem read-only (the default).
    pub readonly_rootfs: bool,
    /// Size of the private `/tmp` tmpfs, in bytes.
    pub tmp_bytes: u64,
    /// Run Docker's init (tini) as PID 1 to reap orphaned processes (the default).
    pub init: bool,
    /// More labels.
    pub labels: HashMap<String, String>,
    /// Tunables of the protocol client (ready timeout, frame limit).
    pub host: HostOptions,
}

impl Default for ContainerOptions {
    fn default() -> Self {
        Self {
            run: "run".into(),
            agent: "agent".into(),
            user: None,
            cpus: None,
            readonly_rootfs: true,
            tmp_bytes: 512 << 20,
            init: true,
            labels: HashMap::new(),
            host: HostOptions::default(),
        }
    }
}

/// How [`ContainerHost::run_once`] bounds its run.
#[derive(Debug, Clone, Default)]
pub struct OneShot {
    /// Kill the container after this long.
    pub deadline: Option<Duration>,
    /// Kill the container once its stdout and stderr together pass this many bytes.
    pub output_limit: Option<u64>,
    /// Kill the container when this fires (the caller got a signal).
    pub cancel: tokio_util::sync::CancellationToken,
}

/// How a [`ContainerHost::run_once`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneShotEnd {
    /// The container's process exited with this code (128+N when a signal N killed it,
    /// as Docker reports it).
    Exited(i32),
    /// [`OneShot::deadline`] passed.
    TimedOut,
    /// The output went over [`OneShot::output_limit`].
    OutputCut,
    /// [`OneShot::cancel`] fired.
    Cancelled,
}

/// Connects to the Docker engine (`DOCKER_HOST`, or the local socket) and agrees on an
/// API version; fails with [`ContainerError::Engine`] if the engine does not answer.
pub async fn connect() -> Result<Docker, ContainerError> {
    let endpoint = std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let engine_error = |message: String| ContainerError::Engine { endpoint: endpoint.clone(), message };
    if let Some(hint) = socket_permission_hint(&endpoint) {
        return Err(engine_error(hint));
    }
    let docker = Docker::connect_with_defaults().map_err(|e| engine_error(e.to_string()))?;
    match tokio::time::timeout(Duration::from_secs(15), docker.negotiate_version()).await {
        Ok(Ok(docker)) => Ok(docker),
        Ok(Err(e)) => Err(engine_error(e.to_string())),
        Err(_) => Err(engine_error("it did not answer within 15 s".into())),
    }
}

/// When the engine's Unix socket refuses this user, says so with the usual remedy: the
/// client library's own error does not name the cause.
fn socket_permission_hint(endpoint: &str) -> Option<String> {
    let path = endpoint.strip_prefix("unix://")?;
    match std::os::unix::net::UnixStream::connect(path) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Some(format!(
            "permission denied on the socket {path}: this user may not use the Docker engine; add it to the \
             `docker` group (`sudo usermod -aG docker $USER`, then log in again) or run orch with a user that \
             may"
        )),
        _ => None,
    }
}

/// One agent's container. Stop it with [`ContainerHost::stop`]; dropping it removes the
/// container in the background.
pub struct ContainerHost {
    docker: Docker,
    id: String,
    name: String,
    removed: bool,
    started: Duration,
    /// Writable roots handed to the container's uid, with their owner before.
    handed: Vec<Owner>,
}

/// A directory and the `uid:gid` that owned it before it was handed over.
type Owner = (PathBuf, u32, u32);

impl fmt::Debug for ContainerHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContainerHost").field("id", &self.id).field("name", &self.name).finish_non_exhaustive()
    }
}

impl ContainerHost {
    /// Creates and starts a container for `policy` running `orch_binary` (mounted at
    /// [`ORCH_MOUNT`]) with `host_args`, and waits for the tool host's `ready`.
    ///
    /// On any failure the container is removed, and the writable roots handed back,
    /// before the error is returned.
    pub async fn start(
        docker: &Docker,
        policy: &Policy,
        orch_binary: &Path,
        host_args: &[String],
        options: &ContainerOptions,
    ) -> Result<(ContainerHost, HostClient), ContainerError> {
        let began = Instant::now();
        let (mut host, binary) = Self::create(docker, policy, orch_binary, host_args, options).await?;
        let created_at = began.elapsed();
        let client = match host.attach_and_start(&binary, options).await {
            Ok(client) => client,
            Err(e) => {
                if let Err(stop) = host.stop().await {
                    tracing::warn!(target: "orch_sandbox::container", "{stop}");
                }
                return Err(e);
            }
        };
        host.started = began.elapsed();
        tracing::debug!(
            target: "orch_sandbox::container",
            container = %host.name,
            created_ms = created_at.as_millis(),
            ready_ms = host.started.as_millis(),
            "container tool host ready"
        );
        Ok((host, client))
    }

    /// Runs `orch_binary` with `args` as the process of a fresh container once: no
    /// protocol, its stdout and stderr copied to `stdout` and `stderr` as they come,
    /// until it exits. The container is killed when [`OneShot::deadline`] passes, when
    /// more than [`OneShot::output_limit`] bytes of output came (what fits is written),
    /// or when [`OneShot::cancel`] fires. The container is removed, and the writable
    /// roots handed back, on every path, errors included.
    ///
    /// The container's stdin stays attached, never written, for as long as this runs:
    /// when this process dies, the engine closes it (`stdin_once`), which is how the
    /// process inside can notice that nobody waits for it any more.
    #[allow(clippy::too_many_arguments)] // `start`'s five, plus the bounds and two sinks
    pub async fn run_once(
        docker: &Docker,
        policy: &Policy,
        orch_binary: &Path,
        args: &[String],
        options: &ContainerOptions,
        run: OneShot,
        stdout: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
        stderr: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
    ) -> Result<OneShotEnd, ContainerError> {
        let (host, binary) = Self::create(docker, policy, orch_binary, args, options).await?;
        let result = host.attach_and_run(&binary, run, stdout, stderr).await;
        let stopped = host.stop().await;
        let end = result?;
        stopped?;
        Ok(end)
    }

    /// Everything before the container starts: leftovers reaped, the image checked, the
    /// writable roots handed to the container's uid, the container created. Returns the
    /// (not yet started) container and the canonical path of the binary.
    async fn create(
        docker: &Docker,
        policy: &Policy,
        orch_binary: &Path,
        args: &[String],
        options: &ContainerOptions,
    ) -> Result<(ContainerHost, PathBuf), ContainerError> {
        reap_once(docker).await;
        let image = policy.image.as_deref().filter(|i| !i.trim().is_empty()).ok_or(ContainerError::NoImage)?;
        let binary = check_binary(orch_binary)?;
        let name = container_name(options);
        let (uid, gid) = choose_user(policy, options)?;
        match docker.inspect_image(image).await {
            Ok(_) => {}
            Err(e) if status_code(&e) == Some(404) => return Err(ContainerError::MissingImage { image: image.into() }),
            Err(e) => return Err(docker_error("inspect the image of", &name, &e)),
        }
        let body = create_body(policy, &binary, args, options, image, uid, gid)?;

        let mut handed = Vec::new();
        for root in &policy.write {
            match hand_over(root, &policy.read, uid, gid) {
                Ok(owner) => handed.extend(owner),
                Err(e) => {
                    hand_back(handed);
                    return Err(e);
                }
            }
        }
        let created =
            match docker.create_container(Some(CreateContainerOptionsBuilder::new().name(&name).build()), body).await {
                Ok(created) => created,
                Err(e) => {
                    hand_back(handed);
                    return Err(match status_code(&e) {
                        Some(404) if e.to_string().contains("image") => {
                            ContainerError::MissingImage { image: image.into() }
                        }
                        _ => docker_error("create", &name, &e),
                    });
                }
            };
        for warning in &created.warnings {
            tracing::warn!(target: "orch_sandbox::container", container = %name, "docker: {warning}");
        }
        // From here on, the container exists: every failure removes it (on drop).
        let host = ContainerHost {
            docker: docker.clone(),
            id: created.id,
            name,
            removed: false,
            started: Duration::ZERO,
            handed,
        };
        Ok((host, binary))
    }

    /// Attaches to the container's stdin, stdout and stderr, streaming (no old logs).
    async fn attach(&self) -> Result<bollard::container::AttachContainerResults, ContainerError> {
        let options =
            AttachContainerOptionsBuilder::new().stdin(true).stdout(true).stderr(true).stream(true).logs(false).build();
        self.docker
            .attach_container(&self.id, Some(options))
            .await
            .map_err(|e| docker_error("attach to", &self.name, &e))
    }

    async fn attach_and_run(
        &self,
        binary: &Path,
        run: OneShot,
        stdout: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
        stderr: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
    ) -> Result<OneShotEnd, ContainerError> {
        let docker = &self.docker;
        let attached = self.attach().await?;
        // Kept open, never written: see `run_once`.
        let _stdin = attached.input;
        let mut output = attached.output;
        if let Err(e) = docker.start_container(&self.id, None).await {
            return Err(ContainerError::Docker {
                action: "start",
                name: self.name.clone(),
                message: format!("{}{}", docker_message(&e), interpreter_hint(binary)),
            });
        }
        let deadline = run.deadline.map(|d| tokio::time::Instant::now() + d);
        let expired = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(expired);
        let mut left = run.output_limit.unwrap_or(u64::MAX);
        let ended = loop {
            let item = tokio::select! {
                biased;
                () = run.cancel.cancelled() => break Some(OneShotEnd::Cancelled),
                () = &mut expired => break Some(OneShotEnd::TimedOut),
                item = output.next() => item,
            };
            let (message, to_stderr) = match item {
                None => break None,
                Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => (message, false),
                Some(Ok(LogOutput::StdErr { message })) => (message, true),
                Some(Ok(LogOutput::StdIn { .. })) => continue,
                Some(Err(e)) => {
                    tracing::debug!(target: "orch_sandbox::container", "the attach stream failed: {e}");
                    break None;
                }
            };
            let len = message.len() as u64;
            let keep = usize::try_from(len.min(left)).unwrap_or(message.len());
            let sink: &mut (dyn tokio::io::AsyncWrite + Unpin + Send) =
                if to_stderr { &mut *stderr } else { &mut *stdout };
            // A reader that went away must not stop the command early: keep draining.
            let _ = sink.write_all(message.get(..keep).unwrap_or_default()).await;
            let _ = sink.flush().await;
            if len > left {
                break Some(OneShotEnd::OutputCut);
            }
            left -= len;
        };
        if let Some(end) = ended {
            return Ok(end);
        }
        // Output ended: the process is gone or going; its status, within the deadline.
        let exited = wait_exit(docker, &self.id);
        tokio::select! {
            biased;
            () = run.cancel.cancelled() => Ok(OneShotEnd::Cancelled),
            () = &mut expired => Ok(OneShotEnd::TimedOut),
            status = exited => match status {
                Some(status) => Ok(OneShotEnd::Exited(status.code().unwrap_or(255))),
                None => Err(ContainerError::Docker {
                    action: "report the exit status of",
                    name: self.name.clone(),
                    message: "the engine did not say how the container ended".into(),
                }),
            },
        }
    }

    async fn attach_and_start(&self, binary: &Path, options: &ContainerOptions) -> Result<HostClient, ContainerError> {
        let docker = &self.docker;
        let attached = self.attach().await?;
        let (stdout_rx, stdout_tx) = tokio::io::simplex(PIPE_BYTES);
        let (stderr_rx, stderr_tx) = tokio::io::simplex(PIPE_BYTES);
        tokio::spawn(demultiplex(attached.output, stdout_tx, stderr_tx));

        if let Err(e) = docker.start_container(&self.id, None).await {
            let hint = interpreter_hint(binary);
            return Err(ContainerError::Docker {
                action: "start",
                name: self.name.clone(),
                message: format!("{}{hint}", docker_message(&e)),
            });
        }

        let exited = {
            let docker = docker.clone();
            let id = self.id.clone();
            Box::pin(async move { wait_exit(&docker, &id).await })
        };
        let kill = {
            let docker = docker.clone();
            let id = self.id.clone();
            Box::new(move || {
                tokio::spawn(async move {
                    let options = KillContainerOptionsBuilder::new().signal("SIGKILL").build();
                    if let Err(e) = docker.kill_container(&id, Some(options)).await {
                        tracing::debug!(target: "orch_sandbox::container", container = %id, "kill failed: {e}");
                    }
                });
            })
        };
        let streams = HostStreams {
            name: format!("container {}", self.name),
            pid: None,
            input: Box::new(attached.input),
            output: Box::new(stdout_rx),
            stderr: Some(Box::new(stderr_rx)),
            exited,
            kill,
        };
        HostClient::from_streams_with(streams, options.host.clone()).await.map_err(|source| {
            let hint = match &source {
                HostError::NotReady { .. } => interpreter_hint(binary),
                _ => String::new(),
            };
            ContainerError::Host { name: self.name.clone(), error: source, hint }
        })
    }

    /// The container's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The container's name (`orch-<run>-<agent>-<pid>-<n>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long [`ContainerHost::start`] took, from the call to the host's `ready`.
    pub fn startup(&self) -> Duration {
        self.started
    }

    /// Force-removes the container (killing whatever still runs in it), then hands the
    /// writable roots it was given back to their owners. A container that is already
    /// gone is not an error. Shut the [`HostClient`] down first if its host should
    /// finish cleanly.
    pub async fn stop(mut self) -> Result<(), ContainerError> {
        self.removed = true;
        remove(&self.docker, &self.id).await.map_err(|e| docker_error("remove", &self.name, &e))?;
        let handed = std::mem::take(&mut self.handed);
        if !handed.is_empty() {
            tokio::task::spawn_blocking(move || hand_back(handed)).await.ok();
        }
        Ok(())
    }
}

impl Drop for ContainerHost {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        tracing::debug!(target: "orch_sandbox::container", container = %self.name, "removing a dropped container");
        remove_in_background(self.id.clone(), std::mem::take(&mut self.handed));
    }
}

/// Removes the containers of this backend whose coordinator is gone: those labelled
/// with this machine's boot id and a pid that no longer runs (or runs another process),
/// and those from another boot or machine that are not running. Returns how many it
/// removed; a container it cannot remove is logged and skipped.
pub async fn reap_leftovers(docker: &Docker) -> Result<usize, ContainerError> {
    let filters = HashMap::from([("label", vec![format!("{LABEL_MANAGED}=true")])]);
    let options = ListContainersOptionsBuilder::new().all(true).filters(&filters).build();
    let list = docker.list_containers(Some(options)).await.map_err(|e| docker_error("list", "leftover", &e))?;
    let boot = boot_id();
    let mut removed = 0;
    for container in list {
        let Some(id) = container.id else { continue };
        let labels = container.labels.unwrap_or_default();
        let running = matches!(container.state, Some(bollard::models::ContainerSummaryStateEnum::RUNNING));
        let same_boot = boot.is_some() && labels.get(LABEL_BOOT) == boot.as_ref();
        let owner_alive = match (labels.get(LABEL_PID).and_then(|p| p.parse::<u32>().ok()), labels.get(LABEL_PID_START))
        {
            (Some(pid), Some(start)) => process_start(pid).as_ref() == Some(start),
            _ => false,
        };
        let orphan = if same_boot { !owner_alive } else { !running };
        if !orphan {
            continue;
        }
        match remove(docker, &id).await {
            Ok(()) => {
                removed += 1;
                tracing::info!(target: "orch_sandbox::container", container = %id, "removed a leftover container");
            }
            Err(e) => {
                tracing::warn!(target: "orch_sandbox::container", container = %id, "could not remove a leftover container: {e}")
            }
        }
    }
    Ok(removed)
}

/// Removes every container this process started that is still there, or only those of
/// `run` (for an orderly exit after aborted agents). Returns how many it removed.
pub async fn remove_own(docker: &Docker, run: Option<&str>) -> Result<usize, ContainerError> {
    let pid = std::process::id().to_string();
    let mut labels = vec![format!("{LABEL_MANAGED}=true"), format!("{LABEL_PID}={pid}")];
    if let Some(run) = run {
        labels.push(format!("{LABEL_RUN}={run}"));
    }
    let filters = HashMap::from([("label", labels)]);
    let options = ListContainersOptionsBuilder::new().all(true).filters(&filters).build();
    let list = docker.list_containers(Some(options)).await.map_err(|e| docker_error("list", "own", &e))?;
    let start = process_start(std::process::id());
    let mut removed = 0;
    for container in list {
        let labels = container.labels.unwrap_or_default();
        if labels.get(LABEL_PID_START) != start.as_ref() || labels.get(LABEL_BOOT) != boot_id().as_ref() {
            continue;
        }
        if let Some(id) = container.id
            && remove(docker, &id).await.is_ok()
        {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Runs [`reap_leftovers`] the first time a container is started in this process.
async fn reap_once(docker: &Docker) {
    static REAPED: AtomicBool = AtomicBool::new(false);
    if REAPED.swap(true, Ordering::SeqCst) {
        return;
    }
    match reap_leftovers(docker).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(target: "orch_sandbox::container", "removed {n} leftover containers of earlier runs"),
        Err(e) => tracing::warn!(target: "orch_sandbox::container", "could not look for leftover containers: {e}"),
    }
}

/// The container configuration for `policy`.
fn create_body(
    policy: &Policy,
    binary: &Path,
    host_args: &[String],
    options: &ContainerOptions,
    image: &str,
    uid: u32,
    gid: u32,
) -> Result<ContainerCreateBody, ContainerError> {
    let limits = &policy.limits;
    let mut labels = options.labels.clone();
    labels.insert(LABEL_MANAGED.into(), "true".into());
    labels.insert(LABEL_RUN.into(), options.run.clone());
    labels.insert(LABEL_AGENT.into(), options.agent.clone());
    labels.insert(LABEL_PID.into(), std::process::id().to_string());
    if let Some(start) = process_start(std::process::id()) {
        labels.insert(LABEL_PID_START.into(), start);
    }
    if let Some(boot) = boot_id() {
        labels.insert(LABEL_BOOT.into(), boot);
    }

    let mut ulimits = Vec::new();
    let mut ulimit = |name: &str, value: Option<u64>| {
        if let Some(v) = value.and_then(|v| i64::try_from(v).ok()) {
            ulimits.push(ResourcesUlimits { name: Some(name.into()), soft: Some(v), hard: Some(v) });
        }
    };
    ulimit("cpu", limits.cpu_seconds);
    ulimit("fsize", limits.file_size_bytes);
    let memory = limits.memory_bytes.and_then(|m| i64::try_from(m).ok());

    let host_config = HostConfig {
        mounts: Some(mounts(policy, binary)?),
        network_mode: Some(match policy.network {
            Network::None => "none".into(),
            Network::Full => "bridge".into(),
            // Its own namespace with only `lo`, where the tool host's listener is the
            // way to the coordinator's egress proxy (see `egress.rs`).
            Network::Proxy => "none".into(),
        }),
        memory,
        // No swap beyond the memory limit.
        memory_swap: memory,
        pids_limit: limits.processes.and_then(|p| i64::try_from(p).ok()),
        nano_cpus: options.cpus.filter(|c| c.is_finite() && *c > 0.0).map(|c| (c * 1e9) as i64),
        ulimits: Some(ulimits),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(options.readonly_rootfs),
        tmpfs: Some(HashMap::from([(
            "/tmp".to_string(),
            format!("rw,nosuid,nodev,mode=1777,size={}", options.tmp_bytes),
        )])),
        init: Some(options.init),
        ipc_mode: Some("private".into()),
        privileged: Some(false),
        auto_remove: Some(false),
        ..Default::default()
    };
    Ok(ContainerCreateBody {
        image: Some(image.into()),
        user: Some(format!("{uid}:{gid}")),
        entrypoint: Some(vec![ORCH_MOUNT.into()]),
        cmd: Some(host_args.to_vec()),
        env: Some(policy.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: Some(policy.cwd.display().to_string()).filter(|c| !c.is_empty()),
        hostname: Some("sandbox".into()),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        labels: Some(labels),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// The bind mounts: the binary, the writable roots, and the read roots outside the
/// system directories.
fn mounts(policy: &Policy, binary: &Path) -> Result<Vec<Mount>, ContainerError> {
    let bind = |source: &Path, target: &str, read_only: bool| Mount {
        target: Some(target.into()),
        source: Some(source.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        bind_options: Some(MountBindOptions {
            propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut mounts = vec![bind(binary, ORCH_MOUNT, true)];
    // The coordinator's socket that receives the egress listener (see `egress.rs`).
    if let Some(egress) = &policy.egress {
        mounts.push(bind(&egress.handoff, crate::egress::CONTAINER_HANDOFF, false));
    }
    // Targets are the paths as the policy writes them (tools and the environment use
    // those); sources are where they lead on the host.
    let mut write: Vec<PathBuf> = Vec::new();
    for root in &policy.write {
        if !root.is_absolute() {
            return Err(ContainerError::WriteRoot {
                path: root.clone(),
                uid: 0,
                message: "it is not an absolute path".into(),
            });
        }
        write.push(root.components().collect());
    }
    write.sort();
    write.dedup();
    for root in &write {
        // A root inside another writable root is reachable through it already.
        if write.iter().any(|other| other != root && root.starts_with(other)) {
            continue;
        }
        mounts.push(bind(&absolute(root), &root.display().to_string(), false));
    }
    // A read root inside a writable root is bound read-only on top of it, so it stays
    // read-only as the policy says; a writable root inside a read root, read-write on
    // top of that. Never the system directories, never all of /tmp.
    for root in policy.read.iter().filter(|r| r.is_absolute()) {
        let target: PathBuf = root.components().collect();
        let source = absolute(root);
        if is_system(&target) || is_system(&source) || target == Path::new("/tmp") || write.contains(&target) {
            continue;
        }
        if source.exists() {
            mounts.push(bind(&source, &target.display().to_string(), true));
        }
    }
    // Masked paths (inside the roots bound above): an empty read-only tmpfs on a
    // directory, a read-only bind of `/dev/null` on a file. Only in the container: the
    // files on the host stay as they are, and the coordinator commits them unchanged.
    for path in policy.masked.iter().filter(|p| p.is_absolute()) {
        let target = path.display().to_string();
        match crate::mask::open_nofollow(path) {
            Ok(Some((_, crate::mask::Kind::Dir))) => mounts.push(Mount {
                target: Some(target),
                typ: Some(MountType::TMPFS),
                read_only: Some(true),
                tmpfs_options: Some(MountTmpfsOptions {
                    size_bytes: Some(4096),
                    mode: Some(0o555),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            Ok(Some((_, crate::mask::Kind::File))) => mounts.push(bind(Path::new("/dev/null"), &target, true)),
            Ok(None) => {}
            Err(e) => {
                return Err(ContainerError::Mask { path: path.clone(), message: e.to_string() });
            }
        }
    }
    // Parents before children (Docker sorts them too).
    mounts.sort_by_key(|m| m.target.as_deref().map_or(0, |t| Path::new(t).components().count()));
    Ok(mounts)
}

fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether `path` is `/` or under one of [`SYSTEM_PREFIXES`].
fn is_system(path: &Path) -> bool {
    path == Path::new("/") || SYSTEM_PREFIXES.iter().any(|p| path.starts_with(p))
}

/// The uid:gid the container runs as; never root.
fn choose_user(policy: &Policy, options: &ContainerOptions) -> Result<(u32, u32), ContainerError> {
    let (uid, gid) = match options.user {
        Some(user) => user,
        None if nix::unistd::getuid().is_root() => policy.uid.map_or((NOBODY, NOBODY), |uid| (uid, uid)),
        None => (nix::unistd::getuid().as_raw(), nix::unistd::getgid().as_raw()),
    };
    if uid == 0 {
        return Err(ContainerError::RootUser);
    }
    Ok((uid, gid))
}

/// Directories never handed to a sandbox, themselves (their subdirectories may be).
const NEVER_HAND_OVER: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root", "/run",
    "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/tmp",
];

/// Makes `root` writable by `uid`: nothing to do if it is already; as root, hands the
/// tree to `uid:gid` and returns its previous owner; otherwise an error.
fn hand_over(root: &Path, read: &[PathBuf], uid: u32, gid: u32) -> Result<Option<Owner>, ContainerError> {
    let fail = |message: String| ContainerError::WriteRoot { path: root.to_path_buf(), uid, message };
    let meta = std::fs::metadata(root).map_err(|e| fail(format!("{e}; create it before starting the sandbox")))?;
    if !meta.is_dir() {
        return Err(fail("it is not a directory".into()));
    }
    let mode = meta.permissions().mode();
    let writable = meta.uid() == uid || mode & 0o002 != 0 || (meta.gid() == gid && mode & 0o020 != 0);
    if writable {
        return Ok(None);
    }
    if !nix::unistd::getuid().is_root() {
        return Err(fail(format!(
            "it belongs to uid {} and orch is not root, so it cannot hand it over; run the container as its owner \
             (ContainerOptions::user) or chown it",
            meta.uid()
        )));
    }
    let canonical = absolute(root);
    let refuse =
        |reason: &str| Err(fail(format!("refusing to hand it over: {reason}; pass a project or scratch directory")));
    if NEVER_HAND_OVER.iter().any(|d| canonical == Path::new(d))
        || ["/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/proc", "/sys", "/dev"]
            .iter()
            .any(|d| canonical.starts_with(d))
    {
        return refuse("it is a system directory");
    }
    if std::env::var_os("HOME").is_some_and(|h| Path::new(&h) == canonical) {
        return refuse("it is the home directory");
    }
    if read.iter().map(|r| absolute(r)).any(|r| r != canonical && r.starts_with(&canonical)) {
        return refuse("it holds a read-only root");
    }
    crate::identity::chown_tree(&canonical, uid, gid).map_err(|e| fail(format!("chown failed: {e}")))?;
    tracing::debug!(
        target: "orch_sandbox::container",
        root = %canonical.display(),
        uid,
        gid,
        "handed a writable root to the container's uid"
    );
    Ok(Some((canonical, meta.uid(), meta.gid())))
}

/// Gives every file under the handed-over roots (those the container created too) back
/// to the owner each root had. Failures are logged: this runs during teardown.
fn hand_back(handed: Vec<Owner>) {
    for (root, uid, gid) in handed {
        if let Err(e) = crate::identity::chown_tree(&root, uid, gid) {
            tracing::warn!(target: "orch_sandbox::container", root = %root.display(), "could not hand the directory back to uid {uid}: {e}");
        }
    }
}

/// The binary to mount: an absolute path to a regular file everyone may execute.
fn check_binary(path: &Path) -> Result<PathBuf, ContainerError> {
    let fail = |message: String| ContainerError::Binary { path: path.to_path_buf(), message };
    let canonical = std::fs::canonicalize(path).map_err(|e| fail(e.to_string()))?;
    let meta = std::fs::metadata(&canonical).map_err(|e| fail(e.to_string()))?;
    if !meta.is_file() {
        return Err(fail("it is not a regular file".into()));
    }
    if meta.permissions().mode() & 0o005 != 0o005 {
        return Err(fail(format!(
            "its mode is {:o}; the container's non-root user needs to read and execute it (chmod o+rx)",
            meta.permissions().mode() & 0o7777
        )));
    }
    Ok(canonical)
}

/// "; `/x/orch` is dynamically linked (…)" when the binary has an ELF interpreter.
fn interpreter_hint(binary: &Path) -> String {
    match elf_interpreter(binary) {
        Some(interp) => format!(
            "; `{}` is dynamically linked (ELF interpreter {interp}), so the image needs a compatible glibc (one at \
             least as new as the build machine's); use such an image (e.g. debian:bookworm) or a statically linked \
             orch",
            binary.display()
        ),
        None => String::new(),
    }
}

/// The ELF interpreter (`PT_INTERP`) of a 64-bit little-endian ELF file, if any.
pub fn elf_interpreter(path: &Path) -> Option<String> {
    const PT_INTERP: u32 = 3;
    let mut file = std::fs::File::open(path).ok()?;
    let mut head = vec![0u8; 64 * 1024];
    let n = file.read(&mut head).ok()?;
    let head = head.get(..n)?;
    if head.get(..4)? != b"\x7fELF" || *head.get(4)? != 2 || *head.get(5)? != 1 {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(head.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(head.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(head.get(at..at + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(ph)? == PT_INTERP {
            let offset = usize::try_from(u64_at(ph + 8)?).ok()?;
            let size = usize::try_from(u64_at(ph + 32)?).ok()?;
            let bytes = head.get(offset..offset + size)?;
            return Some(String::from_utf8_lossy(bytes).trim_end_matches('\0').to_string());
        }
    }
    None
}

/// Copies the attach stream's stdout and stderr into their pipes; both end with it.
async fn demultiplex(
    mut output: std::pin::Pin<Box<dyn futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
    mut stdout: tokio::io::WriteHalf<tokio::io::SimplexStream>,
    mut stderr: tokio::io::WriteHalf<tokio::io::SimplexStream>,
) {
    let mut stderr_open = true;
    while let Some(item) = output.next().await {
        match item {
            Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                if stdout.write_all(&message).await.is_err() {
                    break;
                }
            }
            Ok(LogOutput::StdErr { message }) => {
                // Nobody reading stderr any more must not stop the protocol.
                if stderr_open && stderr.write_all(&message).await.is_err() {
                    stderr_open = false;
                }
            }
            Ok(LogOutput::StdIn { .. }) => {}
            Err(e) => {
                tracing::debug!(target: "orch_sandbox::container", "the attach stream failed: {e}");
                break;
            }
        }
    }
    let _ = stdout.shutdown().await;
    let _ = stderr.shutdown().await;
}

/// Waits for the container to stop and returns its exit status; `None` if the engine
/// cannot say (the container was removed, the engine went away).
async fn wait_exit(docker: &Docker, id: &str) -> Option<ExitStatus> {
    let options = WaitContainerOptionsBuilder::new().condition("not-running").build();
    let mut wait = docker.wait_container(id, Some(options));
    let code = match wait.next().await? {
        Ok(response) => response.status_code,
        Err(bollard::errors::Error::DockerContainerWaitError { code, .. }) => code,
        Err(e) => {
            tracing::debug!(target: "orch_sandbox::container", container = %id, "waiting for the container failed: {e}");
            return None;
        }
    };
    let code = i32::try_from(code).unwrap_or(255) & 0xff;
    Some(ExitStatus::from_raw(code << 8))
}

/// Force-removes a container (and its anonymous volumes); gone already is fine.
async fn remove(docker: &Docker, id: &str) -> Result<(), bollard::errors::Error> {
    let options = RemoveContainerOptionsBuilder::new().force(true).v(true).build();
    match tokio::time::timeout(REMOVE_TIMEOUT, docker.remove_container(id, Some(options))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if status_code(&e) == Some(404) => Ok(()),
        // 409: removal already in progress (another stop, or a reap).
        Ok(Err(e)) if status_code(&e) == Some(409) && e.to_string().contains("in progress") => Ok(()),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(bollard::errors::Error::RequestTimeoutError),
    }
}

/// Removes a container from a thread of its own, with its own runtime and connection (it
/// must work from `Drop`, inside or outside a runtime, even one shutting down), then
/// hands `handed` back.
fn remove_in_background(id: String, handed: Vec<Owner>) {
    let spawned = std::thread::Builder::new().name("orch-container-remove".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(e) => {
                tracing::warn!(target: "orch_sandbox::container", container = %id, "cannot remove the container: {e}");
                return;
            }
        };
        runtime.block_on(async {
            let result = match connect().await {
                Ok(docker) => remove(&docker, &id).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match result {
                Ok(()) => hand_back(handed),
                Err(e) => tracing::warn!(
                    target: "orch_sandbox::container",
                    container = %id,
                    "could not remove the container: {e}; orch removes leftovers at its next start"
                ),
            }
        });
    });
    if let Err(e) = spawned {
        tracing::warn!(target: "orch_sandbox::container", "cannot start a thread to remove a container: {e}");
    }
}

/// `orch-<run>-<agent>-<pid>s<start>-<n>`, in the characters Docker allows: the
/// instance tag ([`crate::instance`]) keeps two runs' names apart even when they share
/// a run id.
fn container_name(options: &ContainerOptions) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let clean = |s: &str| -> String {
        let s: String = s
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') { c } else { '-' })
            .collect();
        s.chars().take(40).collect()
    };
    format!(
        "orch-{}-{}-{}-{}",
        clean(&options.run),
        clean(&options.agent),
        crate::instance::tag(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok().map(|s| s.trim().to_string())
}

/// Field 22 (start time) of `/proc/<pid>/stat`, or `None` if no such process.
fn process_start(pid: u32) -> Option<String> {
    crate::instance::start_time(pid)
}

fn status_code(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

fn docker_message(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.trim().to_string(),
        other => other.to_string(),
    }
}

fn docker_error(action: &'static str, name: &str, e: &bollard::errors::Error) -> ContainerError {
    ContainerError::Docker { action, name: name.into(), message: docker_message(e) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_docker_safe_and_unique() {
        let options = ContainerOptions { run: "run 1/x".into(), agent: "ag:ent".into(), ..Default::default() };
        let a = container_name(&options);
        let b = container_name(&options);
        assert_ne!(a, b);
        assert!(a.starts_with("orch-run-1-x-ag-ent-"), "{a}");
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')));
    }

    #[test]
    fn system_dirs_are_not_bound() {
        assert!(is_system(Path::new("/usr/lib")));
        assert!(is_system(Path::new("/")));
        assert!(is_system(Path::new("/proc")));
        assert!(!is_system(Path::new("/home/u/.cargo/registry")));
        assert!(!is_system(Path::new("/usr2")));
    }

    fn policy(read: &[&Path], write: &[&Path]) -> Policy {
        Policy {
            backend: crate::policy::Backend::Container,
            read: read.iter().map(|p| p.to_path_buf()).collect(),
            write: write.iter().map(|p| p.to_path_buf()).collect(),
            network: Network::None,
            limits: crate::policy::Limits::default(),
            env: Default::default(),
            cwd: write.first().map(|p| p.to_path_buf()).unwrap_or_default(),
            image: Some("img".into()),
            uid: None,
            name: None,
            private_tmpfs: None,
            egress: None,
            masked: Vec::new(),
        }
    }

    #[test]
    fn mounts_bind_the_binary_the_writable_roots_and_non_system_read_roots() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        for sub in ["wt", "wt/sub", "wt/vendor", "home", "toolchain"] {
            std::fs::create_dir_all(base.join(sub)).unwrap();
        }
        let binary = std::env::current_exe().unwrap();
        let p = policy(
            &[
                Path::new("/usr"),
                Path::new("/etc"),
                Path::new("/tmp"),
                &base.join("wt/vendor"),
                &base.join("toolchain"),
                &base.join("missing"),
            ],
            &[&base.join("wt"), &base.join("wt/sub"), &base.join("home/")],
        );
        let mounts = mounts(&p, &binary).unwrap();
        let seen: Vec<(String, bool)> =
            mounts.iter().map(|m| (m.target.clone().unwrap(), m.read_only.unwrap())).collect();
        let at = |sub: &str| base.join(sub).display().to_string();
        assert!(seen.contains(&(ORCH_MOUNT.to_string(), true)), "{seen:?}");
        assert!(seen.contains(&(at("wt"), false)), "{seen:?}");
        assert!(seen.contains(&(at("home"), false)), "{seen:?}");
        assert!(seen.contains(&(at("wt/vendor"), true)), "a read root inside the worktree stays read-only: {seen:?}");
        assert!(seen.contains(&(at("toolchain"), true)), "{seen:?}");
        assert_eq!(seen.len(), 5, "no system dirs, no /tmp, no nested or missing roots: {seen:?}");
        let wt = seen.iter().position(|(t, _)| *t == at("wt")).unwrap();
        let vendor = seen.iter().position(|(t, _)| *t == at("wt/vendor")).unwrap();
        assert!(wt < vendor, "parents are mounted first");

        let relative = policy(&[], &[Path::new("relative/wt")]);
        assert!(matches!(super::mounts(&relative, &binary), Err(ContainerError::WriteRoot { .. })));
    }

    #[test]
    fn masked_paths_get_empty_read_only_mounts_after_their_root() {
        let dir = tempfile::tempdir().unwrap();
        let wt = dir.path().join("wt");
        std::fs::create_dir_all(wt.join("secrets")).unwrap();
        std::fs::write(wt.join(".env"), "TOKEN=x").unwrap();
        std::os::unix::fs::symlink(wt.join(".env"), wt.join("link")).unwrap();
        let binary = std::env::current_exe().unwrap();
        let mut p = policy(&[], &[&wt]);
        p.masked = vec![wt.join(".env"), wt.join("secrets"), wt.join("gone")];
        let mounts = mounts(&p, &binary).unwrap();
        let find = |t: &Path| mounts.iter().position(|m| m.target.as_deref() == Some(&*t.display().to_string()));
        let env = &mounts[find(&wt.join(".env")).unwrap()];
        assert_eq!(
            (env.typ, env.source.as_deref(), env.read_only),
            (Some(MountType::BIND), Some("/dev/null"), Some(true))
        );
        let secrets = &mounts[find(&wt.join("secrets")).unwrap()];
        assert_eq!((secrets.typ, secrets.read_only), (Some(MountType::TMPFS), Some(true)));
        assert!(find(&wt).unwrap() < find(&wt.join(".env")).unwrap(), "the worktree is mounted first");
        assert!(find(&wt.join("gone")).is_none(), "a path that is gone is not mounted");
        // A masked path reached through a symlink is refused, not followed.
        p.masked = vec![wt.join("link")];
        assert!(matches!(super::mounts(&p, &binary), Err(ContainerError::Mask { .. })));
    }

    #[test]
    fn our_own_process_has_a_start_time_and_a_boot() {
        assert!(process_start(std::process::id()).is_some());
        assert!(boot_id().is_some());
        assert_eq!(process_start(u32::MAX), None);
    }

    #[test]
    fn the_test_binary_has_an_interpreter_and_text_files_do_not() {
        let me = std::env::current_exe().unwrap();
        // Test binaries are dynamically linked unless built with crt-static.
        if let Some(interp) = elf_interpreter(&me) {
            assert!(interp.starts_with('/'), "{interp}");
            assert!(interpreter_hint(&me).contains("dynamically linked"));
        }
        assert_eq!(elf_interpreter(Path::new("/etc/hostname")), None);
        assert_eq!(elf_interpreter(Path::new("/nonexistent")), None);
    }
}
