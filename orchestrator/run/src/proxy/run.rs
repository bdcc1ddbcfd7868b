//! The run's egress proxy: started once per run when some agent (or `setup:`) has an
//! allowlist, stopped when the run ends. Each such agent gets a [`Grant`]: its
//! registration (policy and credential), the port its sandbox reaches the proxy on, the
//! environment that points tools at it, and the place its decisions are summed up for
//! the report ([`NetworkReport`]). An agent with credentials also gets the run's CA
//! bundle ([`super::credentials::Bundle`]), written at the first such grant.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use orch_types::Allowlist;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::credentials::{Bundle, CredentialError};
use super::{AgentProxy, EgressPolicy, EgressProxy, EventSink, PolicyError, ProxyEvent, Resolver};

/// Why an agent cannot have its grant.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Credential(#[from] CredentialError),
}

/// The test-only resolver override: `host=addr[,addr];...` (like curl's `--resolve`).
pub const RESOLVE_ENV: &str = "ORCH_PROXY_RESOLVE";

/// One run's proxy.
pub struct RunProxy {
    proxy: EgressProxy,
    /// Where relative `ca` paths of credentials start: the repository.
    root: PathBuf,
    /// The CA bundle of sandboxes with credentials, written at the first.
    bundle: Mutex<Option<Arc<Bundle>>>,
}

impl RunProxy {
    /// Starts the proxy on a random port of 127.0.0.1, resolving names itself (with the
    /// overrides of [`RESOLVE_ENV`], if set).
    pub async fn start(root: PathBuf) -> crate::error::Result<Arc<RunProxy>> {
        let mut resolver = Resolver::default();
        if let Ok(text) = std::env::var(RESOLVE_ENV) {
            resolver = resolver.parse_overrides(&text).map_err(|e| {
                crate::error::Error::Message(format!(
                    "{RESOLVE_ENV} is malformed: {e}; write host=address[,address];..."
                ))
            })?;
        }
        let proxy = EgressProxy::start(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0), resolver)
            .await
            .map_err(|e| crate::error::Error::Message(format!("cannot start the egress proxy: {e}")))?;
        tracing::info!(addr = %proxy.addr(), "egress proxy started");
        Ok(Arc::new(RunProxy { proxy, root, bundle: Mutex::new(None) }))
    }

    /// Registers `agent` with `list` (its credentials read from the coordinator's
    /// environment now). Its decisions go to `sink` and are summed up in the grant's
    /// [`NetworkReport`].
    pub fn grant(self: &Arc<Self>, agent: &str, list: &Allowlist, sink: EventSink) -> Result<Grant, GrantError> {
        let policy = EgressPolicy::new(&list.allow, &list.deny)?;
        let secrets = super::credentials::load_all(&list.credentials, &self.root)?;
        let bundle = if secrets.is_empty() { None } else { Some(self.bundle()?) };
        let summary = Arc::new(Mutex::new(NetworkReport::default()));
        let sum = summary.clone();
        let sink: EventSink = Arc::new(move |event: ProxyEvent| {
            sum.lock().unwrap_or_else(PoisonError::into_inner).add(&event);
            sink(event);
        });
        let registration = self.proxy.register(agent, policy, secrets, sink);
        Ok(Grant { run: self.clone(), registration, summary, serving: Vec::new(), bundle })
    }

    fn bundle(&self) -> Result<Arc<Bundle>, CredentialError> {
        let mut slot = self.bundle.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(bundle) = &*slot {
            return Ok(bundle.clone());
        }
        let bundle = Arc::new(Bundle::write(&*self.proxy.authority()?)?);
        *slot = Some(bundle.clone());
        Ok(bundle)
    }
}

/// One agent's access to the run's proxy. Dropping it unregisters the agent and stops
/// serving its sandbox's listener.
pub struct Grant {
    run: Arc<RunProxy>,
    registration: AgentProxy,
    summary: Arc<Mutex<NetworkReport>>,
    serving: Vec<CancellationToken>,
    /// The run's CA bundle, when the agent has credentials.
    bundle: Option<Arc<Bundle>>,
}

impl Grant {
    /// The port the proxy answers on, inside the sandbox as on the coordinator's side.
    pub fn port(&self) -> u16 {
        self.run.proxy.addr().port()
    }

    /// `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (both cases) with the credential, and
    /// an empty `NO_PROXY`; with credentials, the CA bundle's variables too.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = self.registration.env();
        env.extend(self.bundle.iter().flat_map(|b| b.env()));
        env
    }

    /// The directory of the CA bundle, which the sandbox must be able to read (agents
    /// with credentials only).
    pub fn ca_dir(&self) -> Option<&Path> {
        self.bundle.as_deref().map(Bundle::dir)
    }

    /// Serves the proxy on a listener the sandbox handed over (in its own network
    /// namespace), until the grant is dropped.
    pub fn serve(&mut self, listener: std::net::TcpListener) -> std::io::Result<()> {
        self.serving.push(self.run.proxy.serve_listener(listener)?);
        Ok(())
    }

    /// What the agent contacted and what it was denied, so far.
    pub fn summary(&self) -> NetworkReport {
        self.summary.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        for token in &self.serving {
            token.cancel();
        }
    }
}

/// An agent's network in the report: hosts contacted (with bytes) and hosts denied.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetworkReport {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contacted: Vec<HostTraffic>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied: Vec<HostDenied>,
}

/// Connections to one allowed `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostTraffic {
    pub host: String,
    pub port: u16,
    pub connections: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Requests the proxy added a credential to.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub credentials: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Refusals for one `host:port`, with the last reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostDenied {
    pub host: String,
    pub port: u16,
    pub attempts: u64,
    pub reason: String,
}

impl NetworkReport {
    fn add(&mut self, event: &ProxyEvent) {
        match &event.denied {
            None => match self.contacted.iter_mut().find(|h| h.host == event.host && h.port == event.port) {
                Some(h) => {
                    h.connections += 1;
                    h.bytes_up += event.bytes_up;
                    h.bytes_down += event.bytes_down;
                    h.credentials += event.credentials;
                }
                None => self.contacted.push(HostTraffic {
                    host: event.host.clone(),
                    port: event.port,
                    connections: 1,
                    bytes_up: event.bytes_up,
                    bytes_down: event.bytes_down,
                    credentials: event.credentials,
                }),
            },
            Some(reason) => match self.denied.iter_mut().find(|h| h.host == event.host && h.port == event.port) {
                Some(h) => {
                    h.attempts += 1;
                    h.reason = reason.clone();
                }
                None => self.denied.push(HostDenied {
                    host: event.host.clone(),
                    port: event.port,
                    attempts: 1,
                    reason: reason.clone(),
                }),
            },
        }
    }

    /// Whether nothing was contacted or denied.
    pub fn is_empty(&self) -> bool {
        self.contacted.is_empty() && self.denied.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(host: &str, denied: Option<&str>, up: u64) -> ProxyEvent {
        ProxyEvent {
            agent: "a".into(),
            host: host.into(),
            port: 443,
            denied: denied.map(str::to_string),
            bytes_up: up,
            bytes_down: 2 * up,
            credentials: 0,
        }
    }

    #[test]
    fn the_summary_adds_up_per_host() {
        let mut r = NetworkReport::default();
        r.add(&event("crates.io", None, 10));
        r.add(&event("crates.io", None, 5));
        r.add(&event("evil.example", Some("not in the allowlist"), 0));
        assert_eq!(r.contacted.len(), 1);
        assert_eq!((r.contacted[0].connections, r.contacted[0].bytes_up, r.contacted[0].bytes_down), (2, 15, 30));
        assert_eq!(r.denied[0].attempts, 1);
    }
}
