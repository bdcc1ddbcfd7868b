//! Semantic checks of a typed workflow, each error placed with the YAML tree.
//!
//! Checks: agent ids (branch-safe, unique ignoring case, not reserved), prompts, tools,
//! permission rules, limits, `needs` (unknown targets with a suggestion, cycles with
//! their path), `for_each` and `as`, output schemas (valid JSON Schema), templates
//! (syntax, and every name they read: declared inputs, the fan-out item, agents this
//! one needs, fields those agents' output schemas declare), `setup` and `synthesis`.
//! Agents that failed to deserialize are known by id but not checked further, so one
//! mistake is reported once. The checks `orch run` would otherwise make late are here
//! too: empty prompts and control characters in them, `backend: container` without an
//! image, `mcp__<server>__<tool>` naming a server nobody configures, unknown template
//! filters.
//!
//! The checks are linear in the size of the file: agents are found through an index,
//! never by scanning the list; cycles are found by one iterative depth-first search; an
//! agent's transitive `needs` are walked only when a template reads an agent it does not
//! need directly; "did you mean" over the agent ids has a total budget.

use std::collections::{BTreeSet, VecDeque};
use std::fmt;

use crate::load::{HashMap, HashSet};

use serde_json::Value;

use crate::diagnostic::{Diagnostic, Location, SourceFile};
use crate::load::{did_you_mean, key_list, push_sentence, suggest};
use crate::schema::{Agent, ForEach, KNOWN_TOOLS, Limits, Permissions, SandboxConfig, Workflow, is_known_tool};
use crate::template::{self, Reference};
use crate::yaml::{Entry, Node, Seg, Span};

/// Most names compared for one "did you mean" over the agent ids, and for all of them
/// together: beyond, suggestions are left out rather than making validation quadratic.
const SUGGEST_BUDGET: usize = 2_000_000;

/// Most agent ids listed in a hint.
const MAX_LISTED_IDS: usize = 20;

/// Agent ids that name something else in a run (`orch/<run>/integration`, the synthesis
/// transcript, the setup step).
pub const RESERVED_IDS: [&str; 3] = ["integration", "synthesis", "setup"];

/// Template names that cannot be used for the fan-out item.
const RESERVED_NAMES: [&str; 19] = [
    "inputs", "agents", "loop", "self", "true", "false", "none", "True", "False", "None", "and", "or", "not", "in",
    "is", "if", "else", "for", "pr",
];

/// Longest agent id.
pub const MAX_ID_LEN: usize = 64;

/// Whether `id` is a valid agent id: ASCII letters, digits, `_` and `-`, starting with a
/// letter, at most [`MAX_ID_LEN`] characters. Such ids are safe in branch names
/// (`orch/<run>/<id>`) and file names.
pub fn is_valid_agent_id(id: &str) -> bool {
    id.len() <= MAX_ID_LEN
        && id.starts_with(|c: char| c.is_ascii_alphabetic())
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn is_identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn path(parts: &[&str]) -> Vec<Seg> {
    parts.iter().map(|p| Seg::key(p)).collect()
}

fn with(mut base: Vec<Seg>, seg: Seg) -> Vec<Seg> {
    base.push(seg);
    base
}

/// Runs every check; returns the problems found. `mcp_servers`: the MCP servers
/// configured outside the workflow, if the caller knows them.
pub(crate) fn validate(
    workflow: &Workflow,
    broken: &HashSet<String>,
    mcp_servers: Option<&[String]>,
    env_set: Option<fn(&str) -> bool>,
) -> Vec<Diagnostic> {
    let root = workflow.source.tree.as_ref();
    let entries: &[Entry] = root.entry("agents").and_then(|e| e.value.entries()).unwrap_or_default();
    let all_ids: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    let mut servers: HashSet<&str> = workflow.mcp_servers.keys().map(String::as_str).collect();
    servers.extend(mcp_servers.unwrap_or_default().iter().map(String::as_str));
    let mut checker = Checker {
        workflow,
        source: workflow.source.file.as_ref(),
        root,
        diagnostics: Vec::new(),
        ids: entries.iter().map(|e| e.key.as_str()).collect(),
        entries: entries.iter().map(|e| (e.key.as_str(), e)).collect(),
        agents: workflow.agents.iter().map(|a| (a.id.as_str(), a)).collect(),
        all_ids,
        broken,
        upstream: HashMap::default(),
        servers,
        env_set,
        filters: HashMap::default(),
        suggest_budget: SUGGEST_BUDGET,
    };
    checker.run();
    checker.diagnostics.extend(crate::publish::check(workflow));
    checker.diagnostics
}

struct Checker<'a> {
    workflow: &'a Workflow,
    source: &'a SourceFile,
    root: &'a Node,
    diagnostics: Vec<Diagnostic>,
    /// Every agent id in the file, in order, including agents that did not deserialize.
    all_ids: Vec<&'a str>,
    /// The same ids, to look up.
    ids: HashSet<&'a str>,
    /// The `agents:` entries of the tree by id (the first, for a duplicate).
    entries: HashMap<&'a str, &'a Entry>,
    /// The agents that deserialized, by id.
    agents: HashMap<&'a str, &'a Agent>,
    broken: &'a HashSet<String>,
    /// The transitive `needs` of the agents asked about so far.
    upstream: HashMap<&'a str, HashSet<&'a str>>,
    /// The MCP servers an `mcp__<server>__<tool>` may name.
    servers: HashSet<&'a str>,
    /// Whether each template filter seen so far exists.
    filters: HashMap<String, bool>,
    /// Names "did you mean" may still compare (see [`SUGGEST_BUDGET`]).
    suggest_budget: usize,
    /// Whether a variable is set (and not empty) in the coordinator's environment;
    /// `None`: not checked.
    env_set: Option<fn(&str) -> bool>,
}

/// What a prompt or template belongs to, written out only when a message names it.
#[derive(Debug, Clone, Copy)]
enum What<'s> {
    /// "the prompt of `fix`".
    Prompt(&'s str),
    /// "the synthesis prompt".
    Synthesis,
}

impl fmt::Display for What<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            What::Prompt(id) => write!(f, "the prompt of `{id}`"),
            What::Synthesis => f.write_str("the synthesis prompt"),
        }
    }
}

/// What a template may read.
struct Scope<'s> {
    /// "the prompt of `fix`".
    what: What<'s>,
    /// The agent the template belongs to.
    owner: Option<&'s str>,
    /// The fan-out item's name.
    item: Option<&'s str>,
    /// Whether it may read `agents` at all (then: the agents `owner` needs).
    reads_agents: bool,
}

impl<'a> Checker<'a> {
    fn run(&mut self) {
        self.check_ids();
        if self.workflow.concurrency == Some(0) {
            let at = self.at(&path(&["concurrency"]));
            self.error(
                at,
                "`concurrency` must be at least 1",
                "write how many agents may run at once, e.g. `concurrency: 8`",
            );
        }
        self.check_limits(&self.workflow.limits, || path(&["limits"]));
        self.check_run_limits(&self.workflow.limits);
        let defaults = &self.workflow.defaults;
        self.check_limits(&defaults.limits, || path(&["defaults", "limits"]));
        if let Some(tools) = &defaults.tools {
            self.check_tools(tools, || path(&["defaults", "tools"]));
        }
        if let Some(skills) = &defaults.skills {
            self.check_skills(skills, path(&["defaults", "skills"]));
        }
        self.check_model(defaults.model.as_deref(), || path(&["defaults", "model"]));
        self.check_model(self.workflow.model.as_deref(), || path(&["model"]));
        self.check_permissions(&defaults.permissions, || path(&["defaults", "permissions"]));
        self.check_sandbox(&defaults.sandbox, || path(&["defaults", "sandbox"]));
        self.check_inputs();
        self.check_setup();
        if let Some(network) = &self.workflow.setup_network {
            self.check_network(network, || path(&["setup", "network"]));
        }
        self.check_subagents();
        self.check_extensions();
        if self.workflow.agents.is_empty() && self.broken.is_empty() && self.root.entry("agents").is_some() {
            let at = self.key_at(&path(&["agents"]));
            self.error(
                at,
                "the workflow has no agents",
                "add at least one agent, e.g. `review: { prompt: Review the last commit. }`",
            );
        }
        for agent in &self.workflow.agents {
            self.check_agent(agent);
        }
        self.check_cycles();
        self.check_synthesis();
        self.check_integrate();
    }

    // ----- positions -------------------------------------------------------------

    /// [`Node::find`] from the root, through the index for `agents.<id>`.
    fn find(&self, path: &[Seg]) -> Option<(&'a Node, Option<Span>)> {
        if let [Seg::Key(agents), Seg::Key(id), rest @ ..] = path
            && agents == "agents"
        {
            let entry = self.entries.get(id.as_str())?;
            return match rest {
                [] => Some((&entry.value, Some(entry.key_span))),
                _ => entry.value.find(rest),
            };
        }
        self.root.find(path)
    }

    /// The location of the value at `path`, or of its nearest ancestor that exists.
    fn at(&self, path: &[Seg]) -> Location {
        for len in (0..=path.len()).rev() {
            if let Some((node, _)) = self.find(&path[..len]) {
                return self.source.span(node.span);
            }
        }
        self.source.at(1, 0, 1)
    }

    /// The location of the key at the end of `path` (or of the value, for an index).
    fn key_at(&self, path: &[Seg]) -> Location {
        match self.find(path) {
            Some((_, Some(key_span))) => self.source.span(key_span),
            _ => self.at(path),
        }
    }

    fn node(&self, path: &[Seg]) -> Option<&'a Node> {
        self.find(path).map(|(node, _)| node)
    }

    fn agent(&self, id: &str) -> Option<&'a Agent> {
        self.agents.get(id).copied()
    }

    /// "did you mean" over the agent ids, within [`SUGGEST_BUDGET`].
    fn suggest_id(&mut self, name: &str) -> String {
        if self.all_ids.len() > self.suggest_budget {
            return String::new();
        }
        self.suggest_budget -= self.all_ids.len();
        did_you_mean(name, self.all_ids.iter().copied())
    }

    /// The agent ids for a hint, at most [`MAX_LISTED_IDS`] of them.
    fn id_list(&self) -> String {
        let shown: Vec<&str> = self.all_ids.iter().take(MAX_LISTED_IDS).copied().collect();
        let mut list = key_list(&shown);
        if self.all_ids.len() > MAX_LISTED_IDS {
            list.push_str(&format!(" and {} more", self.all_ids.len() - MAX_LISTED_IDS));
        }
        list
    }

    /// Whether `owner` needs `other`, directly or through other agents.
    fn needs_transitively(&mut self, owner: &str, other: &str) -> bool {
        let Some(agent) = self.agent(owner) else { return false };
        let owner = agent.id.as_str();
        if agent.needs.iter().any(|n| n == other) {
            return true;
        }
        if !self.upstream.contains_key(owner) {
            let mut seen: HashSet<&'a str> = HashSet::default();
            let mut queue: VecDeque<&'a str> = agent.needs.iter().map(String::as_str).collect();
            while let Some(id) = queue.pop_front() {
                if seen.insert(id)
                    && let Some(next) = self.agent(id)
                {
                    queue.extend(next.needs.iter().map(String::as_str));
                }
            }
            self.upstream.insert(owner, seen);
        }
        self.upstream.get(owner).is_some_and(|seen| seen.contains(other))
    }

    fn error(&mut self, location: Location, message: impl Into<String>, hint: impl Into<String>) {
        self.diagnostics.push(Diagnostic::new(message, location, hint));
    }

    // ----- graph -------------------------------------------------------------------

    fn check_ids(&mut self) {
        let mut lower: HashMap<String, &'a str> =
            HashMap::with_capacity_and_hasher(self.all_ids.len(), Default::default());
        let ids = self.all_ids.clone();
        for id in ids {
            let lowered = id.to_ascii_lowercase();
            let at = |checker: &Self| checker.key_at(&path(&["agents", id]));
            if !is_valid_agent_id(id) {
                self.error(
                    at(self),
                    format!("`{id}` is not a valid agent id"),
                    format!(
                        "use ASCII letters, digits, `_` and `-`, starting with a letter, at most {MAX_ID_LEN} \
                         characters (ids become branch names `orch/<run>/<id>`), e.g. `fix-docs`"
                    ),
                );
            } else if RESERVED_IDS.contains(&lowered.as_str()) {
                self.error(
                    at(self),
                    format!("`{id}` is reserved and cannot be an agent id"),
                    format!(
                        "rename the agent; orch itself uses {} (e.g. the branch `orch/<run>/integration`)",
                        key_list(&RESERVED_IDS)
                    ),
                );
            }
            match lower.get(&lowered) {
                Some(&first) if first != id => {
                    let at = at(self);
                    self.error(
                        at,
                        format!("agent ids `{first}` and `{id}` differ only in case"),
                        "rename one of them: their branches would collide on case-insensitive file systems",
                    );
                }
                Some(_) => {}
                None => {
                    lower.insert(lowered, id);
                }
            }
        }
    }

    fn check_cycles(&mut self) {
        let order: HashMap<&str, usize> =
            self.workflow.agents.iter().enumerate().map(|(i, a)| (a.id.as_str(), i)).collect();
        let needs: HashMap<&str, Vec<&str>> = self
            .workflow
            .agents
            .iter()
            .map(|a| (a.id.as_str(), a.needs.iter().map(String::as_str).filter(|n| order.contains_key(n)).collect()))
            .collect();
        // Iterative depth-first search: 1 = on the stack, 2 = done. `on_stack` maps an
        // agent on the current path to its place in `path`, so a cycle is cut out at once.
        let mut state: HashMap<&str, u8> = HashMap::default();
        let mut cycles: Vec<Vec<&str>> = Vec::new();
        for agent in &self.workflow.agents {
            if state.contains_key(agent.id.as_str()) {
                continue;
            }
            let mut path: Vec<&str> = Vec::new();
            let mut on_stack: HashMap<&str, usize> = HashMap::default();
            // (agent, index of the next need to follow)
            let mut stack: Vec<(&str, usize)> = vec![(agent.id.as_str(), 0)];
            state.insert(agent.id.as_str(), 1);
            on_stack.insert(agent.id.as_str(), 0);
            path.push(agent.id.as_str());
            while let Some(top) = stack.last_mut() {
                let (id, next) = *top;
                let list = needs.get(id).map(Vec::as_slice).unwrap_or_default();
                let Some(&need) = list.get(next) else {
                    state.insert(id, 2);
                    on_stack.remove(id);
                    path.pop();
                    stack.pop();
                    continue;
                };
                top.1 += 1;
                match state.get(need) {
                    Some(1) => {
                        if let Some(&pos) = on_stack.get(need) {
                            cycles.push(path[pos..].to_vec());
                        }
                    }
                    Some(_) => {}
                    None => {
                        state.insert(need, 1);
                        on_stack.insert(need, path.len());
                        path.push(need);
                        stack.push((need, 0));
                    }
                }
            }
        }
        let mut reported: HashSet<BTreeSet<&str>> = HashSet::default();
        for mut cycle in cycles {
            if !reported.insert(cycle.iter().copied().collect()) {
                continue;
            }
            // Start with the agent that comes first in the file.
            let first = (0..cycle.len()).min_by_key(|&i| order.get(cycle[i]).copied().unwrap_or(usize::MAX));
            cycle.rotate_left(first.unwrap_or(0));
            let from = cycle[0];
            let to = cycle.get(1).copied().unwrap_or(from);
            let index = self.agent(from).and_then(|a| a.needs.iter().position(|n| n == to)).unwrap_or(0);
            let at = self.at(&with(path(&["agents", from, "needs"]), Seg::Index(index)));
            let mut shown: Vec<&str> = cycle.clone();
            shown.push(from);
            let message = if cycle.len() == 1 {
                format!("agent `{from}` needs itself")
            } else {
                format!("`needs` forms a cycle: {}", shown.join(" -> "))
            };
            self.error(
                at,
                message,
                "an agent runs after the agents it needs, so a cycle can never start: remove one of these needs",
            );
        }
    }

    // ----- settings ----------------------------------------------------------------

    fn check_limits(&mut self, limits: &Limits, base: impl Fn() -> Vec<Seg>) {
        if limits.max_turns == Some(0) {
            let at = self.at(&with(base(), Seg::key("max_turns")));
            self.error(
                at,
                "`max_turns` must be at least 1",
                "write a whole number of model turns, e.g. `max_turns: 40`",
            );
        }
        if limits.max_tokens == Some(0) {
            let at = self.at(&with(base(), Seg::key("max_tokens")));
            self.error(
                at,
                "`max_tokens` must be at least 1",
                "write a whole number of tokens, e.g. `max_tokens: 200000`",
            );
        }
        if let Some(cost) = limits.max_cost_usd
            && !(cost.is_finite() && cost > 0.0)
        {
            let at = self.at(&with(base(), Seg::key("max_cost_usd")));
            self.error(
                at,
                format!("`max_cost_usd` must be more than 0, not {cost}"),
                "write an amount in US dollars, e.g. `max_cost_usd: 2.5`",
            );
        }
        if limits.timeout.is_some_and(|t| t.as_std().is_zero()) {
            let at = self.at(&with(base(), Seg::key("timeout")));
            self.error(at, "`timeout` must be longer than 0", crate::duration::DURATION_HINT);
        }
        for (key, size) in [("max_disk", limits.max_disk), ("max_file_size", limits.max_file_size)] {
            if size.is_some_and(|s| s.is_zero()) {
                let at = self.at(&with(base(), Seg::key(key)));
                self.error(at, format!("`{key}` must be more than 0 bytes"), orch_types::size::SIZE_HINT);
            }
        }
    }

    /// The disk limits bound each agent, not the run: at the top level they would
    /// silently do nothing.
    fn check_run_limits(&mut self, limits: &Limits) {
        for (key, set) in [("max_disk", limits.max_disk.is_some()), ("max_file_size", limits.max_file_size.is_some())] {
            if set {
                let at = self.at(&path(&["limits", key]));
                self.error(
                    at,
                    format!("`{key}` is a limit of each agent, not of the whole run"),
                    format!("move it to `defaults.limits.{key}` (every agent) or to one agent's `limits`"),
                );
            }
        }
    }

    fn check_tools(&mut self, tools: &[String], base: impl Fn() -> Vec<Seg>) {
        for (i, tool) in tools.iter().enumerate() {
            if is_known_tool(tool) {
                if let Some(server) = mcp_server(tool)
                    && !self.servers.contains(server)
                {
                    let at = self.at(&with(base(), Seg::Index(i)));
                    let mut known: Vec<&str> = self.servers.iter().copied().collect();
                    known.sort_unstable();
                    let mut hint = did_you_mean(server, known.iter().copied());
                    push_sentence(
                        &mut hint,
                        &if known.is_empty() {
                            format!(
                                "no MCP server is configured: add `mcp_servers: {{ {server}: {{ command: … }} }}`, or declare it in `.mcp.json`"
                            )
                        } else {
                            format!(
                                "the configured servers are {}; add `{server}` to `mcp_servers:` or `.mcp.json`",
                                key_list(&known)
                            )
                        },
                    );
                    self.error(at, format!("`{tool}` names the MCP server `{server}`, which is not configured"), hint);
                }
                continue;
            }
            let at = self.at(&with(base(), Seg::Index(i)));
            let mut hint = did_you_mean(tool, KNOWN_TOOLS);
            push_sentence(
                &mut hint,
                &format!(
                    "the known tools are {}, and MCP tools written `mcp__<server>__<tool>`",
                    key_list(&KNOWN_TOOLS)
                ),
            );
            self.error(at, format!("unknown tool `{tool}`"), hint);
        }
    }

    /// Skill names are directory names: not empty, no `/`, and each listed once.
    fn check_skills(&mut self, skills: &[String], base: Vec<Seg>) {
        for (i, skill) in skills.iter().enumerate() {
            let problem = if skill.trim().is_empty() || skill.contains('/') || skill.starts_with('.') {
                "is not a skill name"
            } else if skills[..i].contains(skill) {
                "is listed twice"
            } else {
                continue;
            };
            let at = self.at(&with(base.clone(), Seg::Index(i)));
            self.error(
                at,
                format!("`{skill}` in `skills` {problem}"),
                "list skills by the name of their directory under `.orch/skills/` or `.claude/skills/`, once each",
            );
        }
    }

    fn check_model(&mut self, model: Option<&str>, at_path: impl Fn() -> Vec<Seg>) {
        if model.is_some_and(|m| m.trim().is_empty()) {
            let at = self.at(&at_path());
            self.error(
                at,
                "the model name is empty",
                "write a model name, e.g. `model: claude-sonnet-4-5`, or remove the key",
            );
        }
    }

    fn check_permissions(&mut self, permissions: &Permissions, base: impl Fn() -> Vec<Seg>) {
        for (list, rules) in [("allow", &permissions.allow), ("deny", &permissions.deny), ("ask", &permissions.ask)] {
            for (i, rule) in rules.iter().enumerate() {
                if let Err(problem) = check_rule(rule) {
                    let at = self.at(&with(with(base(), Seg::key(list)), Seg::Index(i)));
                    self.error(
                        at,
                        format!("bad permission rule `{rule}`: {problem}"),
                        "write `Tool` or `Tool(pattern)`, e.g. `Bash(git diff *)`, `Edit(src/**)`, `Read(~/.ssh/**)`",
                    );
                }
            }
        }
    }

    fn check_sandbox(&mut self, sandbox: &SandboxConfig, base: impl Fn() -> Vec<Seg>) {
        if let Some(network) = &sandbox.network {
            self.check_network(network, || with(base(), Seg::key("network")));
        }
        if sandbox.image.is_some() && sandbox.backend.is_some_and(|b| b != crate::schema::Backend::Container) {
            let at = self.key_at(&with(base(), Seg::key("image")));
            self.error(
                at,
                "`image` only applies to `backend: container`",
                "remove `image`, or set `backend: container`",
            );
        }
        for (list, paths) in [("read", &sandbox.read), ("write", &sandbox.write)] {
            for (i, p) in paths.iter().enumerate() {
                if p.trim().is_empty() {
                    let at = self.at(&with(with(base(), Seg::key(list)), Seg::Index(i)));
                    self.error(
                        at,
                        format!("empty path in `{list}`"),
                        "write a path, e.g. `~/.cargo/registry`, or remove the item",
                    );
                }
            }
        }
    }

    /// The credentials of an allowlist: well formed, for a host the list allows, from a
    /// variable the coordinator has.
    fn check_network(&mut self, network: &crate::schema::NetworkSetting, base: impl Fn() -> Vec<Seg>) {
        let Some(list) = network.allowlist() else { return };
        let mut seen = HashSet::default();
        for (i, credential) in list.credentials.iter().enumerate() {
            let at_entry = || with(with(base(), Seg::key("credentials")), Seg::Index(i));
            if let Some((field, message, hint)) = credential.problem() {
                let at = self.at(&with(at_entry(), Seg::key(field)));
                self.error(at, message, hint);
                continue;
            }
            let (Some((host, port)), Some((var, _))) = (credential.host_port(), credential.variable()) else {
                continue;
            };
            if !seen.insert((host.clone(), port)) {
                let at = self.at(&with(at_entry(), Seg::key("host")));
                self.error(
                    at,
                    format!("a second credential for `{host}:{port}`"),
                    "keep one credential per host and port",
                );
            }
            if !list.allows_name(&host) {
                let at = self.at(&with(at_entry(), Seg::key("host")));
                self.error(
                    at,
                    format!("the credential is for `{host}`, which the allowlist does not allow"),
                    format!("add `{host}` to `allow` (and keep it out of `deny`), or remove the credential"),
                );
            }
            if let Some(set) = self.env_set
                && !set(var)
            {
                let field = if credential.basic_env.is_some() { "basic_env" } else { "bearer_env" };
                let at = self.at(&with(at_entry(), Seg::key(field)));
                self.error(
                    at,
                    format!("`{var}` is not set, or empty, in orch's environment (the credential for `{host}`)"),
                    format!("export {var} before running orch, e.g. from a CI secret"),
                );
            }
        }
    }

    fn check_inputs(&mut self) {
        for input in &self.workflow.inputs {
            if !is_identifier(&input.name) {
                let at = self.key_at(&path(&["inputs", &input.name]));
                self.error(
                    at,
                    format!("`{}` is not a valid input name", input.name),
                    "use letters, digits and `_`, not starting with a digit, so templates can read `inputs.<name>`",
                );
            }
        }
    }

    fn check_subagents(&mut self) {
        if let Some((field, message, hint)) = self.workflow.subagents.problem() {
            let at = self.at(&path(&["subagents", field]));
            self.error(at, message, hint);
        }
    }

    fn check_setup(&mut self) {
        for (i, command) in self.workflow.setup.iter().enumerate() {
            if command.trim().is_empty() {
                let at = self.at(&with(path(&["setup"]), Seg::Index(i)));
                self.error(at, "empty setup command", "write a shell command, e.g. `cargo fetch`, or remove the item");
            }
        }
    }

    fn check_extensions(&mut self) {
        for (event, groups) in &self.workflow.hooks {
            for (i, group) in groups.iter().enumerate() {
                let group_path = with(with(path(&["hooks"]), Seg::Key(event.as_str().to_string())), Seg::Index(i));
                if group.hooks.is_empty() {
                    let at = self.at(&group_path);
                    self.error(at, "a hook group without hooks", "add `hooks: [{ type: command, command: ... }]`");
                }
                for (k, hook) in group.hooks.iter().enumerate() {
                    let hook_path = with(with(group_path.clone(), Seg::Key("hooks".into())), Seg::Index(k));
                    if hook.command.trim().is_empty() {
                        let at = self.at(&with(hook_path.clone(), Seg::Key("command".into())));
                        self.error(at, "empty hook command", "write a shell command, e.g. `./ci/check.sh`");
                    }
                    if hook.timeout == Some(0) {
                        let at = self.at(&with(hook_path, Seg::Key("timeout".into())));
                        self.error(
                            at,
                            "a hook timeout of 0 seconds",
                            "give the seconds a hook may run, e.g. `timeout: 30`",
                        );
                    }
                }
            }
        }
        for (name, server) in &self.workflow.mcp_servers {
            let server_path = with(path(&["mcp_servers"]), Seg::Key(name.clone()));
            if !crate::extensions::is_server_name(name) {
                let at = self.key_at(&server_path);
                self.error(
                    at,
                    format!("`{name}` cannot name an MCP server"),
                    "use letters, digits, `-` and single `_`: the name becomes part of `mcp__<server>__<tool>`",
                );
            }
            if let Some((message, hint)) = server.problem() {
                let at = self.at(&server_path);
                self.error(at, message, hint);
            } else if server.oauth.as_ref().is_some_and(|o| !o.unattended()) {
                // `.mcp.json` may hold Claude Code's browser sign-in (that server is
                // refused when started); a workflow is orch's own, so say it here.
                let at = self.at(&with(server_path, Seg::Key("oauth".into())));
                self.error(
                    at,
                    "`oauth` names neither `client_secret_env` nor `private_key_env`",
                    "orch runs unattended and cannot sign in through a browser: add `client_secret_env: <VAR>` (or `private_key_env: <VAR>`) naming the coordinator's variable that holds the client's secret (or key)",
                );
            }
        }
    }

    fn check_synthesis(&mut self) {
        let synthesis = &self.workflow.synthesis;
        self.check_model(synthesis.model.as_deref(), || path(&["synthesis", "model"]));
        if let Some(prompt) = &synthesis.prompt {
            let scope = Scope { what: What::Synthesis, owner: None, item: None, reads_agents: false };
            self.check_prompt_text(prompt, path(&["synthesis", "prompt"]), scope.what);
            self.check_template(prompt, path(&["synthesis", "prompt"]), &scope);
        }
        if let Some(size) = synthesis.group_size.filter(|&n| n < 2) {
            let at = self.at(&path(&["synthesis", "group_size"]));
            self.error(
                at,
                format!("`synthesis.group_size` is {size}, but a group must combine at least 2 reports"),
                "write 2 or more (e.g. `group_size: 8`), or leave it out to group by the token budget",
            );
        }
        if synthesis.strategy == crate::schema::SynthesisStrategy::Single && synthesis.group_size.is_some() {
            let at = self.at(&path(&["synthesis", "group_size"]));
            self.error(
                at,
                "`synthesis.group_size` has no effect with `strategy: single`",
                "remove `group_size`, or write `strategy: auto` or `tree`",
            );
        }
    }

    // ----- agents ------------------------------------------------------------------

    fn check_agent(&mut self, agent: &'a Agent) {
        let id = agent.id.as_str();
        let base = path(&["agents", id]);
        if agent.prompt.is_none() && agent.uses.is_none() {
            let at = self.key_at(&base);
            self.error(
                at,
                format!("agent `{id}` has no prompt"),
                "add `prompt:` with the task for this agent, or `uses:` with an agent definition that supplies one",
            );
        }
        self.check_model(agent.model.as_deref(), || with(base.clone(), Seg::key("model")));
        if let Some(tools) = &agent.tools {
            self.check_tools(tools, || with(base.clone(), Seg::key("tools")));
        }
        if let Some(skills) = &agent.skills {
            self.check_skills(skills, with(base.clone(), Seg::key("skills")));
        }
        self.check_limits(&agent.limits, || with(base.clone(), Seg::key("limits")));
        self.check_permissions(&agent.permissions, || with(base.clone(), Seg::key("permissions")));
        self.check_sandbox(&agent.sandbox, || with(base.clone(), Seg::key("sandbox")));
        self.check_needs(agent, &base);
        self.check_base(agent, &base);
        self.check_for_each(agent, &base);
        if let Some(output) = &agent.output {
            self.check_schema(&output.schema, with(with(base.clone(), Seg::key("output")), Seg::key("schema")), id);
        }
        self.check_container_image(agent, &base);
        if let Some(prompt) = &agent.prompt {
            let scope = Scope {
                what: What::Prompt(id),
                owner: Some(id),
                item: agent.for_each.as_ref().map(|_| agent.item_name()),
                reads_agents: true,
            };
            self.check_prompt_text(prompt, with(base.clone(), Seg::key("prompt")), scope.what);
            self.check_template(prompt, with(base, Seg::key("prompt")), &scope);
        }
    }

    /// A prompt says something, and holds no control characters but tab and line breaks.
    fn check_prompt_text(&mut self, prompt: &str, at_path: Vec<Seg>, what: impl fmt::Display) {
        if prompt.trim().is_empty() {
            let at = self.at(&at_path);
            self.error(
                at,
                format!("{what} is empty"),
                "write the task in `prompt:`, or remove the key to take the prompt from `uses:`",
            );
            return;
        }
        if let Some((offset, c)) =
            prompt.char_indices().find(|&(_, c)| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
        {
            let at = match self.node(&at_path) {
                Some(node) => self.escape_at(node, c).unwrap_or_else(|| self.source.inside(node, prompt, offset, 1)),
                None => self.at(&at_path),
            };
            self.error(
                at,
                format!("{what} contains the control character U+{:04X}", u32::from(c)),
                "remove it (a `\\x..` or `\\u....` escape in a double-quoted string makes one); a prompt is text for \
                 the model, and control characters reach it as noise or cut it short",
            );
        }
    }

    /// Where a double-quoted scalar spells the control character `c` as an escape
    /// (`\x1b`, `\u001B`, `\e`, ...), searching the lines the scalar covers.
    fn escape_at(&self, node: &Node, c: char) -> Option<Location> {
        let code = u32::from(c);
        let mut spellings = vec![
            format!("\\x{code:02x}"),
            format!("\\x{code:02X}"),
            format!("\\u{code:04x}"),
            format!("\\u{code:04X}"),
        ];
        let named = match c {
            '\0' => Some("\\0"),
            '\u{7}' => Some("\\a"),
            '\u{8}' => Some("\\b"),
            '\u{b}' => Some("\\v"),
            '\u{c}' => Some("\\f"),
            '\u{1b}' => Some("\\e"),
            _ => None,
        };
        spellings.extend(named.map(str::to_string));
        for line in node.span.start.line..=node.span.end.line.max(node.span.start.line) {
            let text = self.source.line(line);
            let skip = if line == node.span.start.line { node.span.start.col } else { 0 };
            let from = text.char_indices().nth(skip).map_or(text.len(), |(i, _)| i);
            let found =
                spellings.iter().filter_map(|s| text[from..].find(s.as_str()).map(|i| (from + i, s.len()))).min();
            if let Some((byte, len)) = found {
                return Some(self.source.at(line, text[..byte].chars().count(), len));
            }
        }
        None
    }

    /// `backend: container` (the agent's or from `defaults`) needs an image from either.
    fn check_container_image(&mut self, agent: &Agent, base: &[Seg]) {
        let defaults = &self.workflow.defaults.sandbox;
        let backend = agent.sandbox.backend.or(defaults.backend);
        if backend != Some(crate::schema::Backend::Container)
            || agent.sandbox.image.is_some()
            || defaults.image.is_some()
        {
            return;
        }
        let own = with(with(base.to_vec(), Seg::key("sandbox")), Seg::key("backend"));
        let (at, place) = if agent.sandbox.backend.is_some() {
            (self.at(&own), "")
        } else {
            (self.key_at(base), " (from `defaults.sandbox`)")
        };
        self.error(
            at,
            format!("agent `{}` uses the container backend{place} without an image", agent.id),
            "add `image:` to its `sandbox` or to `defaults.sandbox`, e.g. `image: rust:1.88`",
        );
    }

    fn check_needs(&mut self, agent: &Agent, base: &[Seg]) {
        let mut seen = HashSet::with_capacity_and_hasher(agent.needs.len(), Default::default());
        for (i, need) in agent.needs.iter().enumerate() {
            let at = |checker: &Self| checker.at(&with(with(base.to_vec(), Seg::key("needs")), Seg::Index(i)));
            if !seen.insert(need.as_str()) {
                self.error(at(self), format!("`{need}` is listed twice in `needs`"), "remove the repeated id");
            } else if !self.ids.contains(need.as_str()) {
                let at = at(self);
                let mut hint = self.suggest_id(need);
                push_sentence(&mut hint, &format!("`needs` lists ids of agents in this file: {}", self.id_list()));
                self.error(at, format!("`{}` needs `{need}`, which is not an agent", agent.id), hint);
            }
        }
    }

    /// `base: needs` starts from the branches of the agents it needs: it needs some.
    fn check_base(&mut self, agent: &Agent, base: &[Seg]) {
        if agent.base == crate::schema::Base::Needs && agent.needs.is_empty() {
            let at = self.at(&with(base.to_vec(), Seg::key("base")));
            self.error(
                at,
                format!("`{}` has `base: needs` but needs no agent", agent.id),
                "list the agents whose work it starts from in `needs` (e.g. `needs: [fix]`), or remove `base: needs`",
            );
        }
    }

    /// `integrate.message` is a template over `agent.id`, `agent.text`, `agent.output`
    /// and `agent.item` only.
    fn check_integrate(&mut self) {
        let Some(text) = &self.workflow.integrate.message else { return };
        let at_path = path(&["integrate", "message"]);
        let Some(node) = self.node(&at_path) else { return };
        let refs = match template::references(text) {
            Ok(refs) => refs,
            Err(e) => {
                let at = self.source.inside(node, text, e.offset, e.len);
                self.error(
                    at,
                    format!("bad template in `integrate.message`: {}", e.message),
                    "close every `{{` with `}}` and every `{%` with `%}`; write a literal `{{` as `{{ '{{' }}`",
                );
                return;
            }
        };
        for reference in &refs {
            let known = reference.root() == "agent"
                && reference.parts.get(1).is_none_or(|p| matches!(p.as_str(), "id" | "text" | "output" | "item"));
            if known {
                continue;
            }
            let at = match reference.offset {
                Some(o) => self.source.inside(node, text, o, reference.len),
                None => self.source.span(node.span),
            };
            self.error(
                at,
                format!("`integrate.message` reads `{}`, which it cannot see", reference.parts.join(".")),
                "the commit message template sees one agent: `agent.id`, `agent.text` (its final answer), \
                 `agent.output` and `agent.item`",
            );
        }
    }

    fn check_for_each(&mut self, agent: &Agent, base: &[Seg]) {
        let id = agent.id.as_str();
        if let Some(name) = &agent.as_name {
            let at = self.at(&with(base.to_vec(), Seg::key("as")));
            if agent.for_each.is_none() {
                let at = self.key_at(&with(base.to_vec(), Seg::key("as")));
                self.error(
                    at,
                    format!("`as` names the item of `for_each`, but `{id}` has no `for_each`"),
                    "add `for_each:` with the items, or remove `as:`",
                );
            } else if !is_identifier(name) || RESERVED_NAMES.contains(&name.as_str()) {
                self.error(
                    at,
                    format!("`{name}` cannot name the fan-out item"),
                    "use a plain name of letters, digits and `_` that is not `inputs`, `agents`, `loop` or a keyword, \
                     e.g. `as: crate`",
                );
            }
        }
        let for_each_path = || with(base.to_vec(), Seg::key("for_each"));
        match &agent.for_each {
            None => {}
            Some(ForEach::List(items)) if items.is_empty() => {
                let at = self.at(&for_each_path());
                self.error(
                    at,
                    format!("`for_each` of `{id}` is an empty list, so the agent would never run"),
                    "list at least one item, or remove `for_each`",
                );
            }
            Some(ForEach::List(_)) => {}
            Some(ForEach::Expr(text)) => self.check_for_each_expr(agent, text, for_each_path()),
        }
    }

    fn check_for_each_expr(&mut self, agent: &Agent, text: &str, at_path: Vec<Seg>) {
        let id = agent.id.as_str();
        let Some(node) = self.node(&at_path) else { return };
        let Some((expr, offset)) = template::single_expression(text) else {
            let at = self.at(&at_path);
            self.error(
                at,
                format!("`for_each` of `{id}` must be a list or one `{{{{ expression }}}}`"),
                "write a list (`for_each: [core, cli]`) or one quoted expression over an earlier agent's output \
                 (`for_each: \"{{ agents.survey.output.crates }}\"`)",
            );
            return;
        };
        let refs = match template::expression_references(expr) {
            Ok(refs) => refs,
            Err(e) => {
                let at = self.source.inside(node, text, offset + e.offset, e.len);
                self.error(
                    at,
                    format!("bad expression in `for_each` of `{id}`: {}", e.message),
                    "write one expression, e.g. `\"{{ agents.survey.output.crates }}\"`",
                );
                return;
            }
        };
        self.check_filters(node, text, format!("`for_each` of `{id}`"));
        let mut sources: BTreeSet<&str> = BTreeSet::new();
        for reference in &refs {
            // Placed only when there is something to report.
            let source = self.source;
            let at = || match reference.offset {
                Some(o) => source.inside(node, text, offset + o, reference.len),
                None => source.span(node.span),
            };
            match reference.root() {
                "inputs" => self.check_input_ref(reference, at),
                "pr" => self.check_builtin_ref(reference, at),
                "agents" => {
                    let Some(source) = reference.parts.get(1) else {
                        self.error(
                            at(),
                            format!("`for_each` of `{id}` must name the agent it reads"),
                            "write `agents.<id>.output.<field>`, e.g. `\"{{ agents.survey.output.crates }}\"`",
                        );
                        continue;
                    };
                    if !self.ids.contains(source.as_str()) {
                        self.unknown_agent(source, at());
                        continue;
                    }
                    if !agent.needs.contains(source) {
                        self.error(
                            at(),
                            format!("`for_each` of `{id}` reads `agents.{source}`, but `{source}` is not in `needs`"),
                            format!(
                                "add `{source}` to `needs` (`needs: [{source}]`): the fan-out expands when it finishes"
                            ),
                        );
                        continue;
                    }
                    if self.broken.contains(source) {
                        continue;
                    }
                    if self.is_fan_out(source) {
                        self.error(
                            at(),
                            format!("`for_each` of `{id}` reads `{source}`, which fans out itself"),
                            "fan out over the output of a single agent: add one that collects the items, and read its \
                             output",
                        );
                        continue;
                    }
                    if reference.parts.get(2).map(String::as_str) != Some("output") {
                        self.error(
                            at(),
                            format!("`for_each` of `{id}` can only read structured output"),
                            format!("write `agents.{source}.output.<field>`, and give `{source}` an `output.schema`"),
                        );
                        continue;
                    }
                    sources.insert(source);
                    self.check_agent_ref(reference, at, format!("`for_each` of `{id}`"));
                }
                root if root == agent.item_name() && agent.as_name.is_some() => {
                    self.error(
                        at(),
                        format!("`for_each` cannot use its own item `{root}`"),
                        "read an input or an earlier agent's output",
                    );
                }
                root => {
                    let root = root.to_string();
                    self.unknown_variable(&root, at(), "`for_each`", None);
                }
            }
        }
        if sources.len() > 1 {
            let at = self.at(&at_path);
            let names: Vec<&str> = sources.into_iter().collect();
            self.error(
                at,
                format!("`for_each` of `{id}` reads several agents ({})", key_list(&names)),
                "fan out over one agent's output; combine the lists in that agent",
            );
        }
    }

    fn is_fan_out(&self, id: &str) -> bool {
        self.agent(id).is_some_and(|a| a.for_each.is_some())
    }

    fn check_schema(&mut self, schema: &Value, at_path: Vec<Seg>, id: &str) {
        let hint = "write a valid JSON Schema (draft 2020-12) in YAML, e.g. `schema: { type: object, required: [crates], \
                    properties: { crates: { type: array, items: { type: string } } } }`";
        if !(schema.is_object() || schema.is_boolean()) {
            let at = self.at(&at_path);
            self.error(at, format!("`output.schema` of `{id}` must be a JSON Schema mapping"), hint);
            return;
        }
        let problem = match jsonschema::meta::validate(schema) {
            Err(e) => Some((e.to_string(), e.instance_path().as_str().to_string())),
            Ok(()) => match jsonschema::validator_for(schema) {
                Err(e) => Some((e.to_string(), String::new())),
                Ok(_) => None,
            },
        };
        if let Some((message, pointer)) = problem {
            let mut full = at_path.clone();
            let mut node = self.node(&at_path);
            for raw in pointer.split('/').skip(1) {
                let segment = raw.replace("~1", "/").replace("~0", "~");
                let seg = match (node.map(|n| &n.kind), segment.parse::<usize>()) {
                    (Some(crate::yaml::Kind::Seq(_)), Ok(i)) => Seg::Index(i),
                    _ => Seg::Key(segment),
                };
                full.push(seg);
                node = self.node(&full);
            }
            let at = self.at(&full);
            self.error(at, format!("`output.schema` of `{id}` is not a valid JSON Schema: {message}"), hint);
        }
    }

    // ----- templates ---------------------------------------------------------------

    /// Every filter a template applies exists (minijinja would only say so when it
    /// renders, after the agents before it ran).
    fn check_filters(&mut self, node: &Node, text: &str, what: impl fmt::Display) {
        for (name, offset) in template::filters(text) {
            let exists = match self.filters.get(&name) {
                Some(&exists) => exists,
                None => {
                    let exists = template::filter_exists(&name);
                    self.filters.insert(name.clone(), exists);
                    exists
                }
            };
            if !exists {
                let at = self.source.inside(node, text, offset, name.len());
                let mut hint = did_you_mean(&name, template::KNOWN_FILTERS.iter().copied());
                push_sentence(
                    &mut hint,
                    "see the minijinja built-in filters, e.g. `upper`, `lower`, `trim`, `join`, `length`, `tojson`, \
                     `default`, `replace`",
                );
                self.error(at, format!("unknown filter `{name}` in {what}"), hint);
            }
        }
    }

    fn check_template(&mut self, text: &str, at_path: Vec<Seg>, scope: &Scope<'_>) {
        let Some(node) = self.node(&at_path) else { return };
        let refs = match template::references(text) {
            Ok(refs) => refs,
            Err(e) => {
                let at = self.source.inside(node, text, e.offset, e.len);
                self.error(
                    at,
                    format!("bad template in {}: {}", scope.what, e.message),
                    "close every `{{` with `}}` and every `{%` with `%}`; write a literal `{{` as `{{ '{{' }}`",
                );
                return;
            }
        };
        self.check_filters(node, text, scope.what);
        for reference in &refs {
            // Placed only when there is something to report.
            let source = self.source;
            let at = || match reference.offset {
                Some(o) => source.inside(node, text, o, reference.len),
                None => source.span(node.span),
            };
            match reference.root() {
                "inputs" => self.check_input_ref(reference, at),
                root if Some(root) == scope.item => {}
                "pr" => self.check_builtin_ref(reference, at),
                "agents" => {
                    if !scope.reads_agents {
                        self.error(
                            at(),
                            format!("{} cannot read `agents`", scope.what),
                            "the agents' reports are added to the synthesis prompt for you; refer to them in words",
                        );
                        continue;
                    }
                    let Some(other) = reference.parts.get(1) else { continue };
                    if !self.ids.contains(other.as_str()) {
                        self.unknown_agent(other, at());
                    } else if scope.owner == Some(other.as_str()) {
                        self.error(
                            at(),
                            format!("{} reads its own result", scope.what),
                            "an agent can only read agents it needs",
                        );
                    } else if !scope.owner.is_some_and(|owner| self.needs_transitively(owner, other)) {
                        let owner = scope.owner.unwrap_or("this agent");
                        self.error(
                            at(),
                            format!("{} reads `agents.{other}`, but `{owner}` does not need `{other}`", scope.what),
                            format!("add `{other}` to `needs` of `{owner}` so it finishes first"),
                        );
                    } else if !self.broken.contains(other) {
                        self.check_agent_ref(reference, at, scope.what);
                    }
                }
                root => {
                    let root = root.to_string();
                    self.unknown_variable(&root, at(), scope.what, scope.item);
                }
            }
        }
    }

    fn check_input_ref(&mut self, reference: &Reference, at: impl FnOnce() -> Location) {
        let Some(name) = reference.parts.get(1) else { return };
        if self.workflow.inputs.iter().any(|i| &i.name == name) {
            return;
        }
        let declared: Vec<&str> = self.workflow.inputs.iter().map(|i| i.name.as_str()).collect();
        let mut hint = did_you_mean(name, declared.iter().copied());
        let declare = format!("declare it: `inputs: {{ {name}: {{ description: …, default: … }} }}`");
        if hint.is_empty() {
            push_sentence(&mut hint, &declare);
        } else {
            push_sentence(&mut hint, &format!("otherwise {declare}"));
        }
        self.error(at(), format!("unknown input `{name}`"), hint);
    }

    /// `pr.<field>`: the field is one the coordinator fills in.
    fn check_builtin_ref(&mut self, reference: &Reference, at: impl FnOnce() -> Location) {
        let root = reference.root();
        let Some((_, fields)) = crate::plan::BUILTIN_ROOTS.iter().find(|(name, _)| *name == root) else { return };
        let Some(field) = reference.parts.get(1) else { return };
        if fields.contains(&field.as_str()) {
            return;
        }
        let mut hint = did_you_mean(field, fields.iter().copied());
        push_sentence(&mut hint, &format!("`{root}` has {}", key_list(fields)));
        self.error(at(), format!("unknown field `{root}.{field}`"), hint);
    }

    fn unknown_agent(&mut self, name: &str, at: Location) {
        let mut hint = self.suggest_id(name);
        if let Some(dashed) = self.all_ids.iter().find(|id| id.contains('-') && id.starts_with(&format!("{name}-"))) {
            hint = format!("an id with `-` needs brackets in a template: `agents[\"{dashed}\"]`. ");
        }
        push_sentence(&mut hint, &format!("the agents are {}", self.id_list()));
        self.error(at, format!("unknown agent `{name}`"), hint);
    }

    fn unknown_variable(&mut self, name: &str, at: Location, what: impl fmt::Display, item: Option<&str>) {
        let mut names = vec!["inputs", "agents", "pr"];
        names.extend(item);
        let mut hint = did_you_mean(name, names.iter().copied());
        if item.is_none() && name == "item" {
            push_sentence(&mut hint, "`item` exists only in an agent with `for_each`. ");
        }
        push_sentence(
            &mut hint,
            &format!(
                "a template can read `inputs.<name>`, `agents.<id>.text`, `agents.<id>.output`{}",
                item.map(|i| format!(" and the fan-out item `{i}`")).unwrap_or_default()
            ),
        );
        self.error(at, format!("unknown variable `{name}` in {what}"), hint);
    }

    /// `agents.<id>…` where `<id>` is known and allowed: checks the rest of the chain.
    fn check_agent_ref(&mut self, reference: &Reference, at: impl FnOnce() -> Location, what: impl fmt::Display) {
        let Some(other) = reference.parts.get(1) else { return };
        let Some(agent) = self.agent(other) else { return };
        if agent.for_each.is_some() {
            if reference.parts.len() > 2 {
                self.error(
                    at(),
                    format!("`{other}` fans out, so `agents.{other}` is a list of results, one per item"),
                    format!(
                        "loop over it: `{{% for r in agents.{other} %}}{{{{ r.item }}}}: {{{{ r.text }}}}{{% endfor %}}`"
                    ),
                );
            }
            return;
        }
        match reference.parts.get(2).map(String::as_str) {
            None | Some("text") => {}
            Some("output") => match (&agent.output, reference.parts.get(3)) {
                (None, _) => self.error(
                    at(),
                    format!("{what} reads `agents.{other}.output`, but `{other}` has no `output.schema`"),
                    format!(
                        "give `{other}` an `output: {{ schema: … }}`, or read its final answer `agents.{other}.text`"
                    ),
                ),
                (Some(output), Some(field)) => {
                    if let Some(known) = missing_property(&output.schema, field) {
                        let mut hint = did_you_mean(field, known.iter().map(String::as_str));
                        push_sentence(
                            &mut hint,
                            &format!(
                                "the output schema of `{other}` declares {}; add `{field}` to its `properties` if it is meant",
                                key_list(&known.iter().map(String::as_str).collect::<Vec<_>>())
                            ),
                        );
                        self.error(at(), format!("the output of `{other}` has no field `{field}`"), hint);
                    }
                }
                (Some(_), None) => {}
            },
            Some(field) => self.error(
                at(),
                format!("`agents.{other}.{field}` does not exist"),
                format!(
                    "an agent's result has `text` (its final answer) and `output` (its structured output): \
                     `agents.{other}.text`, `agents.{other}.output`"
                ),
            ),
        }
    }
}

/// When `schema` declares `properties` and `name` is not one of them (nor allowed by
/// `additionalProperties` or `patternProperties`), the declared names.
fn missing_property(schema: &Value, name: &str) -> Option<Vec<String>> {
    let properties = schema.get("properties")?.as_object()?;
    if properties.contains_key(name) || schema.get("patternProperties").is_some() {
        return None;
    }
    match schema.get("additionalProperties") {
        None | Some(Value::Bool(false)) => Some(properties.keys().cloned().collect()),
        Some(_) => None,
    }
}

/// The server of an `mcp__<server>__<tool>` name.
fn mcp_server(tool: &str) -> Option<&str> {
    tool.strip_prefix("mcp__")?.split_once("__").map(|(server, _)| server)
}

/// Checks the shape of a permission rule: `Tool` or `Tool(pattern)`.
fn check_rule(rule: &str) -> Result<(), String> {
    let rule = rule.trim();
    let (tool, pattern) = match rule.find('(') {
        None => (rule, None),
        Some(open) => match rule[open + 1..].strip_suffix(')') {
            Some(inner) => (&rule[..open], Some(inner)),
            None => return Err("a pattern must end with `)`".to_string()),
        },
    };
    if tool.is_empty() {
        return Err("it must start with a tool name".to_string());
    }
    let mcp_server = tool.strip_prefix("mcp__").is_some_and(|s| !s.is_empty() && !s.contains("__"));
    if !(is_known_tool(tool) || mcp_server) {
        let suggestion = suggest(tool, KNOWN_TOOLS).map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default();
        return Err(format!("unknown tool `{tool}`{suggestion}"));
    }
    if pattern.is_some_and(|p| p.trim().is_empty()) {
        return Err("the pattern in `()` is empty".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_ids_are_branch_safe() {
        assert!(is_valid_agent_id("fix-docs_2"));
        assert!(!is_valid_agent_id("2fix"));
        assert!(!is_valid_agent_id("fix/docs"));
        assert!(!is_valid_agent_id("fix.lock"));
        assert!(!is_valid_agent_id("fix docs"));
        assert!(!is_valid_agent_id(&"a".repeat(65)));
    }

    #[test]
    fn rules_are_checked() {
        assert!(check_rule("Bash(git diff *)").is_ok());
        assert!(check_rule("Edit").is_ok());
        assert!(check_rule("mcp__github").is_ok());
        assert_eq!(check_rule("Bash(git diff *").unwrap_err(), "a pattern must end with `)`");
        assert_eq!(check_rule("Bsh(x)").unwrap_err(), "unknown tool `Bsh` (did you mean `Bash`?)");
    }

    #[test]
    fn missing_properties_list_the_declared_ones() {
        let schema = serde_json::json!({ "properties": { "crates": {}, "notes": {} } });
        assert_eq!(missing_property(&schema, "crate"), Some(vec!["crates".to_string(), "notes".to_string()]));
        assert_eq!(missing_property(&schema, "crates"), None);
        let open = serde_json::json!({ "properties": { "a": {} }, "additionalProperties": true });
        assert_eq!(missing_property(&open, "b"), None);
    }
}
