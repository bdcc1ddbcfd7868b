//! The catalog of built-in tools: one entry per tool, from which every list of tool
//! names derives (the names a workflow may list, the default tools, the tools the
//! agent loop implements, the results compaction may clear, the tools that need a
//! writable worktree).
//!
//! Adding a tool means adding its [`ToolInfo`] to [`CATALOG`] (and implementing it);
//! the tidy tests of `orch-workflows` and `orch-agents` fail until both agree.

/// What the rest of orch needs to know about one built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolInfo {
    /// The name the model calls and workflows list: `Read`.
    pub name: &'static str,
    /// Other names the model may call it by (`Task` for `Agent`).
    pub aliases: &'static [&'static str],
    /// It can change files, so an agent given it needs a writable worktree.
    pub writes: bool,
    /// Every call of it is read-only, whatever its input (`Bash` is read-only only for
    /// some commands, so it is not).
    pub read_only: bool,
    /// Its old results may be cleared from the context, because calling it again gives
    /// them back.
    pub refetchable: bool,
    /// An agent gets it when neither the agent nor `defaults` lists any tools.
    pub default: bool,
    /// The agent loop implements it among its core tools (`Agent` is set up by the
    /// coordinator instead, because it starts other agents).
    pub core: bool,
    /// It reaches the network from the tool host, so it is offered only to an agent
    /// whose network is not `none` (without one it is absent from the pool).
    pub network: bool,
}

const fn tool(name: &'static str) -> ToolInfo {
    ToolInfo {
        name,
        aliases: &[],
        writes: false,
        read_only: false,
        refetchable: false,
        default: false,
        core: true,
        network: false,
    }
}

/// Every built-in tool, in the order documentation and messages list them.
pub const CATALOG: &[ToolInfo] = &[
    ToolInfo { read_only: true, refetchable: true, default: true, ..tool("Read") },
    ToolInfo { writes: true, ..tool("Write") },
    ToolInfo { writes: true, ..tool("Edit") },
    ToolInfo { writes: true, ..tool("MultiEdit") },
    ToolInfo { writes: true, ..tool("NotebookEdit") },
    ToolInfo { read_only: true, refetchable: true, default: true, ..tool("Glob") },
    ToolInfo { read_only: true, refetchable: true, default: true, ..tool("Grep") },
    ToolInfo { read_only: true, refetchable: true, default: true, ..tool("LS") },
    ToolInfo { writes: true, refetchable: true, ..tool("Bash") },
    // Reading a background command's output consumes it: not refetchable.
    ToolInfo { read_only: true, ..tool("BashOutput") },
    ToolInfo { ..tool("KillShell") },
    ToolInfo { read_only: true, default: true, ..tool("TodoWrite") },
    ToolInfo { aliases: &["Task"], core: false, ..tool("Agent") },
    // Runs in the coordinator: it returns a skill's text, which calling again gives back.
    ToolInfo { read_only: true, refetchable: true, core: false, ..tool("Skill") },
    ToolInfo { read_only: true, refetchable: true, network: true, ..tool("WebFetch") },
    // Runs in the coordinator as a request to the model's API (its server-side search).
    ToolInfo { read_only: true, core: false, network: true, ..tool("WebSearch") },
];

/// The catalog entry of `name`, which may be an alias (`Task` finds `Agent`).
pub fn lookup(name: &str) -> Option<&'static ToolInfo> {
    CATALOG.iter().find(|t| t.name == name || t.aliases.contains(&name))
}

/// Whether an agent given these tools can change files, and so needs a writable
/// worktree. Names outside the catalog (MCP tools) do not count.
pub fn any_writes<S: AsRef<str>>(names: &[S]) -> bool {
    names.iter().any(|n| lookup(n.as_ref()).is_some_and(|t| t.writes))
}

/// Whether `name` is a tool that needs the network (absent from the pool under
/// `network: none`).
pub fn needs_network(name: &str) -> bool {
    lookup(name).is_some_and(|t| t.network)
}

/// Whether a call to `name` may be cleared from the context and fetched again.
pub fn is_refetchable(name: &str) -> bool {
    lookup(name).is_some_and(|t| t.refetchable)
}

/// A subset of the catalog, for the name lists built at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection {
    /// Every tool.
    All,
    /// The tools an agent gets by default.
    Default,
    /// The tools the agent loop implements.
    Core,
    /// The tools whose results may be cleared and fetched again.
    Refetchable,
}

impl Selection {
    const fn includes(self, tool: &ToolInfo) -> bool {
        match self {
            Selection::All => true,
            Selection::Default => tool.default,
            Selection::Core => tool.core,
            Selection::Refetchable => tool.refetchable,
        }
    }

    /// How many tools the selection holds.
    pub const fn len(self) -> usize {
        let mut count = 0;
        let mut i = 0;
        while i < CATALOG.len() {
            if self.includes(&CATALOG[i]) {
                count += 1;
            }
            i += 1;
        }
        count
    }

    /// Whether the selection holds no tool.
    pub const fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The names of the selected tools, in catalog order. `N` must be
    /// [`len`](Selection::len); in a `const` a wrong `N` fails the build.
    pub const fn names<const N: usize>(self) -> [&'static str; N] {
        let mut out = [""; N];
        let mut n = 0;
        let mut i = 0;
        while i < CATALOG.len() {
            if self.includes(&CATALOG[i]) {
                out[n] = CATALOG[i].name;
                n += 1;
            }
            i += 1;
        }
        assert!(n == N, "the array length differs from the selection's size");
        out
    }
}

/// Every tool name a workflow may list.
pub const ALL_NAMES: [&str; Selection::All.len()] = Selection::All.names();
/// The tools of an agent whose workflow lists none: read-only ones.
pub const DEFAULT_NAMES: [&str; Selection::Default.len()] = Selection::Default.names();
/// The tools the agent loop implements.
pub const CORE_NAMES: [&str; Selection::Core.len()] = Selection::Core.names();
/// The tools whose old results compaction may clear.
pub const REFETCHABLE_NAMES: [&str; Selection::Refetchable.len()] = Selection::Refetchable.names();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for tool in CATALOG {
            for name in std::iter::once(&tool.name).chain(tool.aliases) {
                assert!(seen.insert(*name), "{name} appears twice in the catalog");
            }
        }
    }

    #[test]
    fn the_lists_follow_the_flags() {
        assert_eq!(
            ALL_NAMES,
            [
                "Read",
                "Write",
                "Edit",
                "MultiEdit",
                "NotebookEdit",
                "Glob",
                "Grep",
                "LS",
                "Bash",
                "BashOutput",
                "KillShell",
                "TodoWrite",
                "Agent",
                "Skill",
                "WebFetch",
                "WebSearch"
            ]
        );
        assert_eq!(DEFAULT_NAMES, ["Read", "Glob", "Grep", "LS", "TodoWrite"]);
        assert_eq!(
            CORE_NAMES,
            [
                "Read",
                "Write",
                "Edit",
                "MultiEdit",
                "NotebookEdit",
                "Glob",
                "Grep",
                "LS",
                "Bash",
                "BashOutput",
                "KillShell",
                "TodoWrite",
                "WebFetch"
            ]
        );
        assert_eq!(REFETCHABLE_NAMES, ["Read", "Glob", "Grep", "LS", "Bash", "Skill", "WebFetch"]);
        assert!(needs_network("WebFetch") && needs_network("WebSearch"));
        assert!(!needs_network("Read") && !needs_network("mcp__x__y"));
        // A default tool must never be one that changes files.
        assert!(CATALOG.iter().filter(|t| t.default).all(|t| t.read_only && !t.writes));
        assert!(CATALOG.iter().filter(|t| t.read_only).all(|t| !t.writes));
    }

    #[test]
    fn lookups_follow_aliases() {
        assert_eq!(lookup("Task").map(|t| t.name), Some("Agent"));
        assert_eq!(lookup("Agent").map(|t| t.name), Some("Agent"));
        assert!(lookup("read").is_none() && lookup("mcp__x__y").is_none());
        assert!(any_writes(&["Read", "Bash"]) && any_writes(&["Edit".to_string()]));
        assert!(!any_writes(&["Read", "Grep", "Agent", "mcp__fs__write_file"]));
        assert!(is_refetchable("Bash") && !is_refetchable("Edit") && !is_refetchable("nope"));
    }
}
