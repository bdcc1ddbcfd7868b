//! Hooks and MCP servers as configuration: the `hooks:` and `mcp_servers:` keys of a
//! workflow, in the same shapes Claude Code uses in `.claude/settings.json` and
//! `.mcp.json`, so the coordinator can read those files into the same types.
//!
//! ```yaml
//! hooks:
//!   PreToolUse:
//!     - matcher: Bash              # tool names: exact, `A|B`, a regex, or `*`
//!       if: "Bash(git push *)"     # optional: a permission rule the call must match
//!       hooks:
//!         - { type: command, command: ./ci/check-push.sh, timeout: 30 }
//! mcp_servers:
//!   docs: { command: python3, args: [tools/docs_server.py] }      # stdio
//!   search: { type: http, url: "http://127.0.0.1:8123/mcp" }     # streamable HTTP
//!   tickets:                                                     # HTTP behind OAuth
//!     type: http
//!     url: https://mcp.example.com/mcp
//!     oauth: { client_id: orch-ci, client_secret_env: TICKETS_CLIENT_SECRET }
//! ```

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use orch_types::HookEvent;

/// `hooks:`: per event, the matcher groups in file order.
pub type HookSettings = BTreeMap<HookEvent, Vec<HookMatcher>>;

/// One matcher group: which calls it applies to, and the commands to run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookMatcher {
    /// Tool names (PreToolUse, PostToolUse, PostToolUseFailure) or what other events
    /// match (a source, trigger, agent type, notification or error kind, reason): an
    /// exact name, names joined by `|`, a regular expression, or `*`/empty for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// A permission rule such as `Bash(git push *)` the call must also match.
    #[serde(rename = "if", default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    pub hooks: Vec<HookCommand>,
}

/// The kind of a hook; orch runs commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HookKind {
    #[default]
    Command,
}

/// One hook command.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookCommand {
    #[serde(rename = "type", default)]
    pub kind: HookKind,
    /// A shell command, run with `sh -c` in the agent's sandbox and working directory.
    pub command: String,
    /// Seconds before the hook is killed (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// How an MCP server is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum McpTransport {
    /// A process speaking MCP on stdin/stdout, started inside the agent's sandbox.
    #[default]
    Stdio,
    /// Streamable HTTP at `url`.
    Http,
    /// The same as `http` (the name some `.mcp.json` files use).
    StreamableHttp,
    /// The older HTTP+SSE transport. Accepted in declarations, so that a `.mcp.json`
    /// written for Claude Code still loads; orch refuses that server alone when an
    /// agent starts it.
    Sse,
}

/// One MCP server, under `mcp_servers.<name>` (or `mcpServers.<name>` of `.mcp.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    #[serde(rename = "type", default)]
    pub transport: McpTransport,
    /// The program of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment of a stdio server (the sandbox passes no other secrets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The endpoint of an HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The OAuth client an HTTP server is reached with (the client credentials grant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<McpOAuth>,
}

/// `oauth:` of an HTTP MCP server: a client registered in advance with the server's
/// authorization server, which orch uses without a person (the client credentials
/// grant). The secret or key is never written here: the declaration names the
/// coordinator's environment variable that holds it. Keys are snake_case; the
/// camelCase spellings of Claude Code's `.mcp.json` (`clientId`, `callbackPort`,
/// `authServerMetadataUrl`) are accepted too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpOAuth {
    /// The client id the authorization server issued.
    #[serde(alias = "clientId")]
    pub client_id: String,
    /// The variable holding the client secret (`client_secret_basic` or `_post`).
    #[serde(default, alias = "clientSecretEnv", skip_serializing_if = "Option::is_none")]
    pub client_secret_env: Option<String>,
    /// The variable holding a PEM private key (PKCS#8 RSA or P-256, or PKCS#1 RSA):
    /// the client signs a JWT assertion (`private_key_jwt`, RFC 7523).
    #[serde(default, alias = "privateKeyEnv", skip_serializing_if = "Option::is_none")]
    pub private_key_env: Option<String>,
    /// `RS256` or `ES256`; by default the one the key's type gives.
    #[serde(default, alias = "signingAlgorithm", skip_serializing_if = "Option::is_none")]
    pub signing_algorithm: Option<String>,
    /// The scopes to ask for, separated by spaces; by default those the server's
    /// `WWW-Authenticate` challenge names, else its metadata's `scopes_supported`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<String>,
    /// The authorization server's metadata document, to skip discovery.
    #[serde(default, alias = "authServerMetadataUrl", skip_serializing_if = "Option::is_none")]
    pub auth_server_metadata_url: Option<String>,
    /// Claude Code's port for the browser sign-in's redirect. Accepted so that its
    /// `.mcp.json` loads; orch never signs in through a browser.
    #[serde(default, alias = "callbackPort", skip_serializing_if = "Option::is_none")]
    pub callback_port: Option<u16>,
}

/// The signing algorithms `oauth.signing_algorithm` may name.
pub const OAUTH_SIGNING_ALGORITHMS: &[&str] = &["RS256", "ES256"];

impl McpOAuth {
    /// What is wrong with this block, if anything: `(message, hint)`. A block with
    /// neither a secret nor a key (Claude Code's browser sign-in) is not wrong here:
    /// orch refuses that server alone when an agent starts it ([`Self::unattended`]).
    pub fn problem(&self) -> Option<(&'static str, &'static str)> {
        if self.client_id.trim().is_empty() {
            return Some(("`oauth.client_id` is empty", "write the client id the authorization server issued"));
        }
        if self.client_secret_env.is_some() && self.private_key_env.is_some() {
            return Some((
                "`oauth` names both a client secret and a private key",
                "keep one: `client_secret_env` for a secret, or `private_key_env` for private_key_jwt",
            ));
        }
        let names = [self.client_secret_env.as_deref(), self.private_key_env.as_deref()];
        if names.into_iter().flatten().any(|n| !is_env_name(n)) {
            return Some((
                "`oauth.client_secret_env` and `oauth.private_key_env` name an environment variable",
                "write the variable's name (letters, digits, `_`), e.g. `client_secret_env: TICKETS_CLIENT_SECRET`, never the secret itself",
            ));
        }
        if let Some(alg) = &self.signing_algorithm {
            if self.private_key_env.is_none() {
                return Some((
                    "`oauth.signing_algorithm` without `private_key_env`",
                    "add `private_key_env`, or remove `signing_algorithm`",
                ));
            }
            if !OAUTH_SIGNING_ALGORITHMS.contains(&alg.as_str()) {
                return Some(("`oauth.signing_algorithm` is not RS256 or ES256", "write `RS256` or `ES256`"));
            }
        }
        if self.scopes.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Some((
                "`oauth.scopes` is empty",
                "write the scopes separated by spaces, or remove `scopes` to take the server's",
            ));
        }
        if self.auth_server_metadata_url.as_deref().is_some_and(|u| !is_http_url(u)) {
            return Some((
                "`oauth.auth_server_metadata_url` is not an http(s) URL",
                "write the URL of the authorization server's metadata, e.g. `https://auth.example.com/.well-known/oauth-authorization-server`",
            ));
        }
        None
    }

    /// Whether orch can get a token without a person: a secret or a key is named.
    pub fn unattended(&self) -> bool {
        self.client_secret_env.is_some() || self.private_key_env.is_some()
    }
}

/// Why a server whose `oauth` names no secret and no key is not started.
pub const OAUTH_NEEDS_CREDENTIALS: &str = "its `oauth` block names no secret and no key, and orch runs unattended, so it cannot sign in through a browser; add `client_secret_env` (or `private_key_env`) naming the coordinator's environment variable that holds the client's secret (or private key)";

/// Whether `name` can be an environment variable's name.
fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn is_http_url(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

impl McpServer {
    pub fn is_http(&self) -> bool {
        matches!(self.transport, McpTransport::Http | McpTransport::StreamableHttp)
    }

    /// What is wrong with this declaration, if anything: `(message, hint)`.
    pub fn problem(&self) -> Option<(&'static str, &'static str)> {
        if self.transport == McpTransport::Sse {
            return None;
        }
        if self.is_http() {
            if self.url.as_deref().is_none_or(|u| !is_http_url(u)) {
                return Some(("an http MCP server needs a `url`", "write `url: http://host:port/mcp` (http or https)"));
            }
            if let Some(oauth) = &self.oauth {
                if self.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization")) {
                    return Some((
                        "an MCP server with both `oauth` and an `Authorization` header",
                        "keep one: `oauth` gets the token itself, a header sends a fixed one",
                    ));
                }
                return oauth.problem();
            }
        } else if self.oauth.is_some() {
            return Some((
                "`oauth` is for HTTP MCP servers",
                "a stdio server gets its credentials through `env`; remove `oauth`, or write `type: http` with a `url`",
            ));
        } else if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
            return Some((
                "a stdio MCP server needs a `command`",
                "write `command: <program>` and `args: [...]`, or `type: http` with a `url`",
            ));
        }
        None
    }
}

/// Whether `name` can be an MCP server name (it becomes part of tool names).
pub fn is_server_name(name: &str) -> bool {
    !name.is_empty() && !name.contains("__") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
