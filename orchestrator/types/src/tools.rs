//! The catalog of built-in tools: one entry per tool, from which every list of tool
//! names derives (the names a workflow may list, the default tools, the tools the tool
//! host runs, the results compaction may clear, the tools that need a writable
//! worktree, what each tool's permission rules take, the book's tool table, docs/src/concepts/tools.md).
//!
//! Adding a tool means adding its [`ToolInfo`] to [`CATALOG`] (and implementing it);
//! the tidy tests of `orch-workflows` and `orch-agents` fail until both agree, and
//! until no list of tool names is kept anywhere else.

/// What the specifier of a permission rule on a tool means: `Read(src/**)` is a path
/// pattern, `Bash(git diff:*)` a command pattern, `WebFetch(domain:example.com)` a host,
/// `Agent(reviewer)` a name; a plain tool takes no specifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    /// The path the call works on (gitignore-style patterns).
    Path,
    /// The shell command line.
    Command,
    /// The host a call reaches, as `domain:example.com`.
    Domain,
    /// Free text with `*` wildcards: a sub-agent type, a skill, a search query.
    Name,
    /// No specifier: a rule names every call of the tool.
    Plain,
}

/// Where a call of the tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runs {
    /// In the agent's confined tool host, across the host protocol.
    Host,
    /// In the coordinator, beside the agent loop (it starts agents, reads what the
    /// coordinator holds, or asks the model's API).
    Coordinator,
}

/// What the rest of orch needs to know about one built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolInfo {
    /// The name the model calls and workflows list: `Read`.
    pub name: &'static str,
    /// Other names the model may call it by (`Task` for `Agent`).
    pub aliases: &'static [&'static str],
    /// What its permission rules' specifier means.
    pub rule: RuleKind,
    /// Where its calls run.
    pub runs: Runs,
    /// It can change files, so an agent given it needs a writable worktree.
    pub writes: bool,
    /// Every call of it is read-only, whatever its input (`Bash` is read-only only for
    /// some commands, so it is not).
    pub read_only: bool,
    /// Every call of it may run beside other such calls of one answer (`Bash` may only
    /// for read-only commands, so it is not).
    pub concurrency_safe: bool,
    /// Its old results may be cleared from the context, because calling it again gives
    /// them back.
    pub refetchable: bool,
    /// An agent gets it when neither the agent nor `defaults` lists any tools.
    pub default: bool,
    /// It starts a sub-agent: it needs no approval, and the sub-agent gets the stricter
    /// permission mode instead.
    pub starts_agent: bool,
    /// It reaches the network from the tool host, so it is offered only to an agent
    /// whose network is not `none` (without one it is absent from the pool).
    pub network: bool,
    /// The input field naming the path it works on, whose directory's instruction files
    /// come with the result the first time.
    pub path_field: Option<&'static str>,
    /// One line of documentation: the book's tool table.
    pub doc: &'static str,
}

const fn tool(name: &'static str, doc: &'static str) -> ToolInfo {
    ToolInfo {
        name,
        aliases: &[],
        rule: RuleKind::Plain,
        runs: Runs::Host,
        writes: false,
        read_only: false,
        concurrency_safe: false,
        refetchable: false,
        default: false,
        starts_agent: false,
        network: false,
        path_field: None,
        doc,
    }
}

/// A tool that only looks at the files under a path.
const fn looks(name: &'static str, field: &'static str, doc: &'static str) -> ToolInfo {
    ToolInfo {
        rule: RuleKind::Path,
        read_only: true,
        concurrency_safe: true,
        refetchable: true,
        default: true,
        path_field: Some(field),
        ..tool(name, doc)
    }
}

/// A tool that changes the file under a path.
const fn edits(name: &'static str, field: &'static str, doc: &'static str) -> ToolInfo {
    ToolInfo { rule: RuleKind::Path, writes: true, path_field: Some(field), ..tool(name, doc) }
}

/// Every built-in tool, in the order documentation and messages list them.
pub const CATALOG: &[ToolInfo] = &[
    looks("Read", "file_path", DOC_READ),
    edits("Write", "file_path", DOC_WRITE),
    edits("Edit", "file_path", DOC_EDIT),
    edits("MultiEdit", "file_path", DOC_MULTI_EDIT),
    edits("NotebookEdit", "notebook_path", DOC_NOTEBOOK_EDIT),
    looks("Glob", "path", DOC_GLOB),
    looks("Grep", "path", DOC_GREP),
    looks("LS", "path", DOC_LS),
    ToolInfo { rule: RuleKind::Command, writes: true, refetchable: true, ..tool("Bash", DOC_BASH) },
    // Reading a background command's output consumes it: not refetchable.
    ToolInfo { read_only: true, concurrency_safe: true, ..tool("BashOutput", DOC_BASH_OUTPUT) },
    tool("KillShell", DOC_KILL_SHELL),
    ToolInfo { read_only: true, default: true, ..tool("TodoWrite", DOC_TODO_WRITE) },
    ToolInfo {
        aliases: &["Task"],
        rule: RuleKind::Name,
        runs: Runs::Coordinator,
        concurrency_safe: true,
        starts_agent: true,
        ..tool("Agent", DOC_AGENT)
    },
    // Reads what the coordinator holds: the reports of the caller's background sub-agents.
    ToolInfo {
        runs: Runs::Coordinator,
        read_only: true,
        concurrency_safe: true,
        ..tool("TaskOutput", DOC_TASK_OUTPUT)
    },
    // Stops one of the agent's own background sub-agents: nothing outside the agent's work
    // changes, so it needs no approval (as in Claude Code), but it never runs early.
    ToolInfo { runs: Runs::Coordinator, read_only: true, ..tool("TaskStop", DOC_TASK_STOP) },
    // It returns a skill's text, which calling again gives back.
    ToolInfo {
        rule: RuleKind::Name,
        runs: Runs::Coordinator,
        read_only: true,
        concurrency_safe: true,
        refetchable: true,
        ..tool("Skill", DOC_SKILL)
    },
    ToolInfo {
        rule: RuleKind::Domain,
        read_only: true,
        concurrency_safe: true,
        refetchable: true,
        network: true,
        ..tool("WebFetch", DOC_WEB_FETCH)
    },
    // A request to the model's API (its server-side search).
    ToolInfo {
        rule: RuleKind::Name,
        runs: Runs::Coordinator,
        read_only: true,
        concurrency_safe: true,
        network: true,
        ..tool("WebSearch", DOC_WEB_SEARCH)
    },
];

/// Claude Code's tools that orch does not have, which permission rules may still name
/// so that a settings file shared with Claude Code loads (the rule matches nothing).
pub const FOREIGN: &[(&str, RuleKind)] = &[
    ("NotebookRead", RuleKind::Path),
    ("SlashCommand", RuleKind::Name),
    ("KillBash", RuleKind::Plain),
    ("ExitPlanMode", RuleKind::Plain),
    ("ListMcpResources", RuleKind::Plain),
    ("ReadMcpResource", RuleKind::Plain),
];

/// What a rule's specifier means for `name`, a catalog tool, one of its aliases or a
/// [`FOREIGN`] one; `None` for any other name.
pub fn rule_kind(name: &str) -> Option<RuleKind> {
    lookup(name).map(|t| t.rule).or_else(|| FOREIGN.iter().find(|(n, _)| *n == name).map(|(_, k)| *k))
}

/// The book's tool table (docs/src/concepts/tools.md), in Markdown: one row per tool, where it runs and what it does.
pub fn markdown_table() -> String {
    let mut out = String::from("| tool | runs in | what it does |\n|---|---|---|\n");
    for tool in CATALOG {
        let runs = match tool.runs {
            Runs::Host => "tool host",
            Runs::Coordinator => "coordinator",
        };
        out.push_str(&format!("| `{}` | {runs} | {} |\n", tool.name, tool.doc));
    }
    out
}

const DOC_READ: &str = r#"lines numbered as Claude Code numbers them (`1<tab>`), the whole file up to a 100 KB result (then a note gives the `offset` to continue from; `offset`, `limit` pick lines); refuses binary files and directories; reads UTF-8 and UTF-16. Images as image blocks; PDFs as document blocks: one of more than 10 pages needs `pages` (`"3"`, `"1-5"`, at most 20 pages), and only those pages are sent (cut with `lopdf`)"#;
const DOC_WRITE: &str =
    r#"writes a file; overwriting needs a prior `Read` and an unchanged file (the refusal says which `Read` to make)"#;
const DOC_EDIT: &str = r#"replaces `old_string` by `new_string` (`replace_all`); needs a prior `Read`, refuses a stale file, a missing match, or several matches without `replace_all` (saying how many); keeps CRLF, BOMs and UTF-16; tolerates curly versus straight quotes; `$` in the replacement is literal"#;
const DOC_MULTI_EDIT: &str = r#"several `Edit`s of one file (`edits: [{old_string, new_string, replace_all}]`), applied in order and written once: all or nothing, with the error naming the entry that failed; same read and staleness rules as `Edit`"#;
const DOC_NOTEBOOK_EDIT: &str = r#"replaces, inserts or deletes one cell of a `.ipynb` (`cell_id`, `new_source`, `cell_type`, `edit_mode`); the rest of the notebook's JSON is kept, written back as Jupyter writes it"#;
const DOC_GLOB: &str = r#"files matching a glob as Claude Code's: a pattern without `/` matches at any depth, git-ignored and hidden files are listed (never `.git`), oldest first, 100 at most"#;
const DOC_GREP: &str = r#"ripgrep's engine: `content`, `files_with_matches` or `count` modes, `-i`, `-n`, `-o`, `-A`/`-B`/`-C` (`context`), `glob` and `type` filters, `head_limit` and `offset` to page, `multiline`"#;
const DOC_LS: &str = r#"a directory tree, honouring `.gitignore`"#;
const DOC_BASH: &str = r#"`bash -c` in its own process group, starting where the last command ended (`cd` carries over within the worktree; a command that ends outside it sends the next to the worktree root, and the result says so), with `CLAUDECODE=1`, `CLAUDE_CODE_ENTRYPOINT=sdk-cli` and `GIT_EDITOR=true`; the whole group is killed at the end; exit codes reported; output over 30,000 characters is cut in the middle. A command still running at its timeout (2 min by default, 10 min at most) moves to the background, as `run_in_background: true` starts one: the result gives its shell id (`bash_1`, ...) for `BashOutput` and `KillShell`"#;
const DOC_BASH_OUTPUT: &str = r#"a background shell's new output since the last call (`bash_id`, optional `filter` regex) and its status; unread output is kept up to 30,000 characters per stream"#;
const DOC_KILL_SHELL: &str = r#"stops a background shell and its process group (`shell_id`); at most 16 run at once, and all are killed when the agent ends"#;
const DOC_TODO_WRITE: &str = r#"the agent's task list"#;
const DOC_AGENT: &str = r#"starts a sub-agent (`prompt`, optional `description`, `subagent_type`, `tools`, `model`: `sonnet`, `opus`, `haiku`, `inherit` or a model id) with its own context and limits, and returns its final answer; with `run_in_background: true` the call returns at once with the sub-agent's id and the report is added to the caller's conversation when it finishes; see [Sub-agents](subagents.md#sub-agents-and-agent-files)"#;
const DOC_TASK_OUTPUT: &str = r#"reads a background sub-agent's report by its id (`task_id`; `block`, true by default, waits up to `timeout` ms, 30,000 by default, 600,000 at most); comes with `Agent`; a shell id is sent to `BashOutput`"#;
const DOC_TASK_STOP: &str = r#"stops a background sub-agent and its subtree by its id (`task_id`) and returns what it had reported; comes with `Agent`; a shell id is sent to `KillShell`"#;
const DOC_SKILL: &str = r#"loads one of the repository's skills (`skill`, optional `args`): its full text and the directory of its files; see [Skills](skills.md#skills)"#;
const DOC_WEB_FETCH: &str = r#"fetches one page (`url`, `prompt`) from the tool host, through the sandbox's proxy environment; http is upgraded to https (not for loopback hosts), redirects are followed only within one host (another host is reported to the model), HTML becomes Markdown (`htmd`), bodies are capped at 10 MB and text at 100,000 characters. Claude Code answers `prompt` with a small model; orch returns the page with the prompt restated above it, for the agent's own model to answer. Offered only when the agent's network is not `none`"#;
const DOC_WEB_SEARCH: &str = r#"searches the web (`query`, `allowed_domains` or `blocked_domains`) as Claude Code does: a nested request to the Anthropic API offering only its `web_search` server tool (with the domain filters, at most 8 searches); the results (titles, URLs, ages) and the model's summary are the tool result, and its tokens count against the agent's budgets. Offered only with the `anthropic` provider and a network that is not `none`"#;

/// The catalog entry of `name`, which may be an alias (`Task` finds `Agent`).
pub fn lookup(name: &str) -> Option<&'static ToolInfo> {
    CATALOG.iter().find(|t| t.name == name || t.aliases.contains(&name))
}

/// The tool a name stands for: an alias is its tool (`Task` is `Agent`); any other
/// name is itself.
pub fn canonical(name: &str) -> &str {
    lookup(name).map_or(name, |t| t.name)
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
    /// The tools that run in the tool host (the agent loop's core tools).
    Core,
    /// The tools whose results may be cleared and fetched again.
    Refetchable,
}

impl Selection {
    const fn includes(self, tool: &ToolInfo) -> bool {
        match self {
            Selection::All => true,
            Selection::Default => tool.default,
            Selection::Core => matches!(tool.runs, Runs::Host),
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
                "TaskOutput",
                "TaskStop",
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
    fn path_tools_name_their_path_field() {
        for tool in CATALOG {
            assert_eq!(tool.path_field.is_some(), tool.rule == RuleKind::Path, "{}", tool.name);
            assert!(!tool.doc.is_empty() && !tool.doc.contains('\n'), "{}: one line of documentation", tool.name);
        }
        assert!(CATALOG.iter().filter(|t| t.starts_agent).all(|t| t.runs == Runs::Coordinator));
        assert_eq!(rule_kind("Task"), Some(RuleKind::Name));
        assert_eq!(rule_kind("NotebookRead"), Some(RuleKind::Path));
        assert_eq!(rule_kind("WebFetch"), Some(RuleKind::Domain));
        assert_eq!(rule_kind("Nope"), None);
        assert!(FOREIGN.iter().all(|(n, _)| lookup(n).is_none()));
        let table = markdown_table();
        assert_eq!(table.lines().count(), CATALOG.len() + 2);
        assert!(table.contains("| `WebSearch` | coordinator |") && table.contains("| `Read` | tool host |"));
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
