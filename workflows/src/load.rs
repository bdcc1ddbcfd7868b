//! Loading: YAML text to a validated [`Workflow`], or every problem found, each with
//! `file:line:column` and a hint.
//!
//! Loading goes in three passes and collects errors as it goes: the YAML tree (syntax
//! errors stop here; duplicate keys do not), the typed structs (each top-level key and
//! each agent on its own, so one bad agent does not hide the next), then the semantic
//! checks of [`validate`](crate::validate). Diagnostics come back sorted by position.

use std::path::Path;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::de::{DeError, DeErrorKind, from_node};
use crate::diagnostic::{Diagnostic, Location, SourceFile};
use crate::duration::DURATION_HINT;
use crate::schema::{Agent, Defaults, Input, Integrate, Limits, Source, Synthesis, WORKFLOW_KEYS, Workflow};
use crate::yaml::{self, Entry, Kind, MAX_FILE_BYTES, Node, Scalar, Seg, YamlError, path_string};

/// The maps and sets of loading and validation, keyed by ids and names from the file:
/// foldhash instead of SipHash, which was the largest single cost at 100,000 agents.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// See [`HashMap`].
pub(crate) type HashSet<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;

/// Most extra deserialization attempts per value, to collect more than one error.
const MAX_PRUNES: usize = 20;

/// How to load a workflow: the size cap, and what the file may refer to that lives
/// outside it.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The largest file accepted, in bytes ([`MAX_FILE_BYTES`] by default).
    pub max_bytes: usize,
    /// MCP servers configured outside the workflow (`.mcp.json`, settings). `None`: only
    /// the workflow's own `mcp_servers` count, so `mcp__<server>__<tool>` must name one of
    /// those.
    pub mcp_servers: Option<Vec<String>>,
    /// Whether a variable is set, not empty, in the coordinator's environment (the
    /// variables credentials name). `None`: not checked.
    pub env_set: Option<fn(&str) -> bool>,
}

impl Default for LoadOptions {
    fn default() -> LoadOptions {
        LoadOptions { max_bytes: MAX_FILE_BYTES, mcp_servers: None, env_set: None }
    }
}

/// Loads and validates the workflow file at `path`.
pub fn load(path: impl AsRef<Path>) -> Result<Workflow, Vec<Diagnostic>> {
    load_with(path, &LoadOptions::default())
}

/// Loads and validates the workflow file at `path`, reading at most
/// `options.max_bytes` of it.
pub fn load_with(path: impl AsRef<Path>, options: &LoadOptions) -> Result<Workflow, Vec<Diagnostic>> {
    let path = path.as_ref();
    let bytes = crate::input::read_capped(path, options.max_bytes, "the workflow file").map_err(|d| vec![d])?;
    load_bytes(&bytes, &path.display().to_string(), options)
}

/// Loads and validates a workflow from the bytes of a file; `file_name` is used in
/// diagnostics. Bytes that are not UTF-8 are reported at their line and column.
pub fn load_bytes(bytes: &[u8], file_name: &str, options: &LoadOptions) -> Result<Workflow, Vec<Diagnostic>> {
    let text = crate::input::decode(file_name, bytes, options.max_bytes).map_err(|d| vec![d])?;
    load_checked(text, file_name, options)
}

/// Loads and validates a workflow from `text`; `file_name` is used in diagnostics.
pub fn load_str(text: &str, file_name: &str) -> Result<Workflow, Vec<Diagnostic>> {
    load_str_with(text, file_name, &LoadOptions::default())
}

/// [`load_str`] with [`LoadOptions`].
pub fn load_str_with(text: &str, file_name: &str, options: &LoadOptions) -> Result<Workflow, Vec<Diagnostic>> {
    crate::input::check_size(file_name, text.as_bytes(), options.max_bytes).map_err(|d| vec![d])?;
    crate::input::check_text(file_name, text).map_err(|d| vec![d])?;
    load_checked(text, file_name, options)
}

/// Loads text that passed the checks of [`crate::input`].
fn load_checked(text: &str, file_name: &str, options: &LoadOptions) -> Result<Workflow, Vec<Diagnostic>> {
    let source = SourceFile::new(file_name, text);
    let mut loader = Loader { source: &source, diagnostics: Vec::new() };
    let root = match yaml::parse(text) {
        Ok((Some(root), errors)) => {
            loader.yaml_errors(errors);
            root
        }
        Ok((None, errors)) => {
            loader.yaml_errors(errors);
            loader.diagnostics.push(Diagnostic::new(
                "the workflow file is empty",
                source.at(1, 0, 1),
                "start with `version: 1`, a `name:` and an `agents:` mapping (see docs/src/reference/workflow-files.md)",
            ));
            return Err(loader.diagnostics);
        }
        Err(errors) => {
            loader.yaml_errors(errors);
            return Err(loader.diagnostics);
        }
    };
    let workflow = loader.workflow(&root, file_name);
    let mut diagnostics = loader.diagnostics;
    if let Some((mut workflow, broken)) = workflow {
        workflow.source = Source { file: Arc::new(source.clone()), tree: Arc::new(root) };
        diagnostics.extend(crate::validate::validate(
            &workflow,
            &broken,
            options.mcp_servers.as_deref(),
            options.env_set,
        ));
        if diagnostics.is_empty() {
            return Ok(workflow);
        }
    }
    diagnostics.sort_by_key(|d| (d.location.line, d.location.column));
    diagnostics.dedup();
    Err(diagnostics)
}

struct Loader<'s> {
    source: &'s SourceFile,
    diagnostics: Vec<Diagnostic>,
}

impl Loader<'_> {
    fn yaml_errors(&mut self, errors: Vec<YamlError>) {
        for e in errors {
            let mut diagnostic = Diagnostic::new(e.message, self.source.span(e.span), e.hint);
            diagnostic.notes = e.notes;
            self.diagnostics.push(diagnostic);
        }
    }

    /// Deserializes one value; on error records it and returns `None`.
    ///
    /// To report more than the first problem, the value is deserialized again with the
    /// offending part removed, until it deserializes or nothing more can be removed
    /// (every field below the top level is optional, so this converges quickly). A value
    /// with errors is still `None`: a pruned value would cause follow-up errors.
    fn field<T: DeserializeOwned>(&mut self, entry: &Entry, path: Vec<Seg>) -> Option<T> {
        let mut pruned: Option<Node> = None;
        for _ in 0..=MAX_PRUNES {
            let node = pruned.as_ref().unwrap_or(&entry.value);
            let err = match from_node::<T>(node, path.clone(), Some(entry.key_span)) {
                // Only a value that deserialized untouched is good.
                Ok(value) => return pruned.is_none().then_some(value),
                Err(err) => err,
            };
            let target = prune_target(&err, path.len());
            self.diagnostics.push(de_diagnostic(self.source, err));
            let mut next = node.clone();
            if !target.is_some_and(|relative| next.remove(&relative)) {
                return None;
            }
            pruned = Some(next);
        }
        None
    }

    /// Reads the top level. Returns the workflow (with defaults where a key was bad or
    /// missing) and the ids of agents that did not deserialize, or `None` when there is
    /// nothing to validate further.
    fn workflow(&mut self, root: &Node, file_name: &str) -> Option<(Workflow, HashSet<String>)> {
        let Some(entries) = root.entries() else {
            self.diagnostics.push(Diagnostic::new(
                format!("a workflow file must be a mapping, not {}", root.describe()),
                self.source.span(root.span),
                format!("write the workflow as `key: value` lines; the keys are {}", key_list(WORKFLOW_KEYS)),
            ));
            return None;
        };
        let stem = Path::new(file_name).file_stem().map(|s| s.to_string_lossy().into_owned());
        let mut workflow = Workflow {
            version: 1,
            name: stem.unwrap_or_else(|| "workflow".to_string()),
            description: None,
            model: None,
            concurrency: None,
            limits: Limits::default(),
            defaults: Defaults::default(),
            inputs: Vec::new(),
            setup: Vec::new(),
            setup_network: None,
            agents: Vec::new(),
            synthesis: Synthesis::default(),
            integrate: Integrate::default(),
            fail_fast: false,
            subagents: Default::default(),
            hooks: Default::default(),
            mcp_servers: Default::default(),
            publish: None,
            source: Source { file: Arc::new(self.source.clone()), tree: Arc::new(Node::empty()) },
        };
        let mut broken = HashSet::default();
        let mut saw_version = false;
        let mut saw_agents = false;
        for entry in entries {
            let path = vec![Seg::Key(entry.key.clone())];
            match entry.key.as_str() {
                "version" => {
                    saw_version = true;
                    if let Some(version) = self.field::<u32>(entry, path) {
                        if version != 1 {
                            self.diagnostics.push(Diagnostic::new(
                                format!("unsupported workflow version {version}"),
                                self.source.span(entry.value.span),
                                "this orch reads `version: 1`",
                            ));
                        }
                        workflow.version = version;
                    }
                }
                // The schema's URL for editors (`$schema: .../workflow.schema.json`).
                "$schema" => {
                    let _ = self.field::<String>(entry, path);
                }
                "name" => workflow.name = self.field(entry, path).unwrap_or(workflow.name),
                "description" => workflow.description = self.field(entry, path).flatten(),
                "model" => workflow.model = self.field(entry, path).flatten(),
                "concurrency" => workflow.concurrency = self.field(entry, path).flatten(),
                "limits" => workflow.limits = self.field(entry, path).unwrap_or_default(),
                "defaults" => workflow.defaults = self.field(entry, path).unwrap_or_default(),
                "setup" if entry.value.entries().is_some() => {
                    if let Some(setup) = self.field::<crate::schema::SetupConfig>(entry, path) {
                        workflow.setup = setup.commands;
                        workflow.setup_network = setup.network;
                    }
                }
                "setup" => workflow.setup = self.field(entry, path).unwrap_or_default(),
                "synthesis" => workflow.synthesis = self.field(entry, path).unwrap_or_default(),
                "integrate" => workflow.integrate = self.field(entry, path).unwrap_or_default(),
                "fail_fast" => workflow.fail_fast = self.field(entry, path).unwrap_or_default(),
                "subagents" => workflow.subagents = self.field(entry, path).unwrap_or_default(),
                "hooks" => workflow.hooks = self.field(entry, path).unwrap_or_default(),
                "mcp_servers" => workflow.mcp_servers = self.field(entry, path).unwrap_or_default(),
                "publish" => workflow.publish = self.field(entry, path).flatten(),
                "inputs" => workflow.inputs = self.inputs(entry),
                "agents" => {
                    saw_agents = true;
                    workflow.agents = self.agents(entry, &mut broken);
                }
                other => {
                    // A misspelt `agents:` or `version:` is reported once, as a typo.
                    match suggest(other, WORKFLOW_KEYS.iter().copied()) {
                        Some("agents") => saw_agents = true,
                        Some("version") => saw_version = true,
                        _ => {}
                    }
                    self.diagnostics.push(unknown_key_diagnostic(
                        other,
                        &[],
                        WORKFLOW_KEYS,
                        self.source.span(entry.key_span),
                    ))
                }
            }
        }
        let top = self.source.at(root.span.start.line, root.span.start.col, 1);
        if !saw_version {
            self.diagnostics.push(Diagnostic::new(
                "the workflow has no `version`",
                top.clone(),
                "add `version: 1` as the first line",
            ));
        }
        if !saw_agents {
            self.diagnostics.push(Diagnostic::new(
                "the workflow has no `agents`",
                top,
                "add an `agents:` mapping, e.g. `agents: { review: { prompt: Review the last commit. } }`",
            ));
        }
        Some((workflow, broken))
    }

    fn inputs(&mut self, entry: &Entry) -> Vec<Input> {
        let Some(entries) = self.mapping(entry, "a mapping from input name to `{ description, default }`") else {
            return Vec::new();
        };
        let mut inputs = Vec::new();
        for input in entries {
            let path = vec![Seg::key("inputs"), Seg::Key(input.key.clone())];
            let decl = match &input.value.kind {
                Kind::Scalar { value: Scalar::Null, .. } => Some(Input::default()),
                _ => self.field::<Input>(input, path),
            };
            if let Some(mut decl) = decl {
                decl.name = input.key.clone();
                inputs.push(decl);
            }
        }
        inputs
    }

    fn agents(&mut self, entry: &Entry, broken: &mut HashSet<String>) -> Vec<Agent> {
        let Some(entries) = self.mapping(entry, "a mapping from agent id to its settings") else {
            return Vec::new();
        };
        let mut agents = Vec::new();
        for agent in entries {
            let path = vec![Seg::key("agents"), Seg::Key(agent.key.clone())];
            let parsed = match &agent.value.kind {
                // `survey:` with nothing under it: reported as a missing prompt.
                Kind::Scalar { value: Scalar::Null, .. } => Some(Agent::default()),
                _ => self.field::<Agent>(agent, path),
            };
            match parsed {
                Some(mut parsed) => {
                    parsed.id = agent.key.clone();
                    agents.push(parsed);
                }
                None => {
                    broken.insert(agent.key.clone());
                }
            }
        }
        agents
    }

    fn mapping<'a>(&mut self, entry: &'a Entry, what: &str) -> Option<&'a [Entry]> {
        match &entry.value.kind {
            Kind::Map(entries) => Some(entries),
            Kind::Scalar { value: Scalar::Null, .. } => Some(&[]),
            _ => {
                self.diagnostics.push(Diagnostic::new(
                    format!("`{}` must be {what}, not {}", entry.key, entry.value.describe()),
                    self.source.span(entry.value.span),
                    key_hint(&entry.key).unwrap_or_else(|| format!("write {what}")),
                ));
                None
            }
        }
    }
}

/// The part of a value to remove after `err`, relative to the value's path (`depth`
/// segments long): the key that is unknown, or the node that is wrong (a mapping that
/// lacks a key goes as a whole).
fn prune_target(err: &DeError, depth: usize) -> Option<Vec<Seg>> {
    let mut relative = err.path.as_ref()?.get(depth..)?.to_vec();
    if let DeErrorKind::UnknownKey { key, .. } = &err.kind {
        relative.push(Seg::Key(key.clone()));
    }
    (!relative.is_empty()).then_some(relative)
}

fn unknown_key_diagnostic(key: &str, path: &[Seg], allowed: &[&str], location: Location) -> Diagnostic {
    let place = if path.is_empty() { "at the top level".to_string() } else { format!("in `{}`", path_string(path)) };
    let mut hint = did_you_mean(key, allowed.iter().copied());
    if key == "<<" {
        push_sentence(
            &mut hint,
            "YAML merge keys are not supported; repeat the settings or put them under `defaults`. ",
        );
    }
    if allowed.is_empty() {
        push_sentence(&mut hint, "remove this key");
    } else {
        push_sentence(&mut hint, &format!("the allowed keys here are {}", key_list(allowed)));
    }
    Diagnostic::new(format!("unknown key `{key}` {place}"), location, hint)
}

/// `a`, `b`, `c`.
pub(crate) fn key_list(keys: &[&str]) -> String {
    keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
}

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub(crate) fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (c, strsim::damerau_levenshtein(&lower, &c.to_lowercase())))
        .filter(|(c, d)| *d <= (c.chars().count().max(word.chars().count()) / 3).max(1))
        .min_by_key(|(_, d)| *d)
        .map(|(c, _)| c)
}

/// "did you mean `x`? " when a candidate is close to `word`, else nothing.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    suggest(word, candidates).map(|best| format!("did you mean `{best}`? ")).unwrap_or_default()
}

/// Appends a sentence to a hint, capitalized when it follows another sentence.
pub(crate) fn push_sentence(hint: &mut String, sentence: &str) {
    if hint.is_empty() {
        hint.push_str(sentence);
        return;
    }
    if !hint.ends_with(' ') {
        hint.push(' ');
    }
    let mut chars = sentence.chars();
    if let Some(first) = chars.next() {
        hint.extend(first.to_uppercase());
        hint.push_str(chars.as_str());
    }
}

/// The last key of a path, skipping list indexes.
fn last_key(path: &[Seg]) -> Option<&str> {
    path.iter().rev().find_map(|s| match s {
        Seg::Key(k) => Some(k.as_str()),
        Seg::Index(_) => None,
    })
}

/// How to write the value of a key.
pub(crate) fn key_hint(key: &str) -> Option<String> {
    let hint = match key {
        "version" => "write `version: 1`",
        "name" | "description" | "prompt" | "uses" => {
            "write text; quote it if it starts with `{`, `[`, `*`, `&` or `!`"
        }
        "model" => "write a model name, e.g. `model: claude-sonnet-4-5`",
        "concurrency" => "write how many agents may run at once, e.g. `concurrency: 8`",
        "max_turns" => "write a whole number of model turns, e.g. `max_turns: 40`",
        "max_tokens" => "write a whole number of tokens, e.g. `max_tokens: 200000`",
        "max_cost_usd" => "write an amount in US dollars, e.g. `max_cost_usd: 2.5`",
        "timeout" => DURATION_HINT,
        "tools" => "write a list of tool names, e.g. `tools: [Read, Grep, Edit]`",
        "needs" => "write a list of agent ids, e.g. `needs: [survey]`",
        "for_each" => {
            "write a list (`for_each: [core, cli]`) or one quoted expression over an earlier agent's output \
             (`for_each: \"{{ agents.survey.output.crates }}\"`)"
        }
        "as" => "write the name of the item variable, e.g. `as: crate`",
        "backend" => "write one of `landlock`, `container`, `none`",
        "network" => {
            "write `network: none`, `network: full`, or an allowlist such as \
             `network: { allow: [preset:rust, docs.example.com], deny: [internal.example.com] }`"
        }
        "commands" => "write a list of shell commands, e.g. `commands: [cargo fetch]`",
        "image" => "write a container image, e.g. `image: rust:1.88`",
        "read" | "write" => "write a list of paths, e.g. `read: [~/.cargo/registry]`",
        "mode" => "write one of `default`, `accept-edits`, `plan`, `bypass`",
        "allow" | "deny" | "ask" => "write a list of rules, e.g. `deny: [\"Bash(git push *)\"]`",
        "integrate" => {
            "write one of `none`, `branches`, `merge`, `squash`, or a mapping such as \
             `integrate: { mode: squash, message: \"{{ agent.id }}: {{ agent.text }}\", prune: true }`"
        }
        "base" => "write `base: needs` (start from the branches of the agents it needs) or `base: run`",
        "expect" => "write a mapping, e.g. `expect: { changes: true }`",
        "changes" | "prune" => "write `true` or `false`",
        "fail_fast" | "continue_on_failure" => "write `true` or `false`",
        "subagents" => "write a mapping, e.g. `subagents: { max_depth: 3, max_concurrent: 10, max_total: 200 }`",
        "setup" => {
            "write a list of shell commands, e.g. `setup: [cargo fetch]`, or \
             `setup: { commands: [cargo fetch], network: { allow: [preset:rust] } }`"
        }
        "schema" => {
            "write a JSON Schema in YAML, e.g. `schema: { type: object, properties: { ok: { type: boolean } } }`"
        }
        "output" => "write `output: { schema: <JSON Schema> }`",
        "sandbox" => "write a mapping, e.g. `sandbox: { backend: landlock, network: none }`",
        "limits" => "write a mapping, e.g. `limits: { max_turns: 40, timeout: 10m, max_cost_usd: 3 }`",
        "permissions" => "write a mapping, e.g. `permissions: { mode: default, deny: [\"Bash(git push *)\"] }`",
        "defaults" => "write a mapping with the keys `tools`, `model`, `sandbox`, `limits`, `permissions`",
        "synthesis" => {
            "write a mapping with the keys `prompt`, `model`, `strategy` (auto, single, tree) and `group_size`"
        }
        "inputs" => "write a mapping, e.g. `inputs: { target: { description: Crate to fix, default: core } }`",
        "agents" => "write a mapping from agent id to its settings, e.g. `agents: { review: { prompt: … } }`",
        _ => return None,
    };
    Some(hint.to_string())
}

/// Words a deserialization error as a diagnostic.
pub(crate) fn de_diagnostic(source: &SourceFile, err: DeError) -> Diagnostic {
    let path = err.path.unwrap_or_default();
    let location = source.span(err.span.unwrap_or_default());
    let dotted = path_string(&path);
    let in_network = path.iter().any(|s| matches!(s, Seg::Key(k) if k == "network"));
    let hint_for_path = || match last_key(&path) {
        Some("allow" | "deny") if in_network => Some(
            "write host names (`docs.example.com`), `*.example.com`, `preset:rust`, `preset:node`, \
             `preset:python`, IP addresses or CIDR ranges"
                .to_string(),
        ),
        key => key_hint(key.unwrap_or("")),
    };
    match err.kind {
        DeErrorKind::Type { expected, found } => {
            let what = match path.last() {
                Some(Seg::Index(_)) => format!("each item of `{}`", path_string(&path[..path.len() - 1])),
                _ => format!("`{dotted}`"),
            };
            let mut hint = hint_for_path().unwrap_or_else(|| format!("write {expected}"));
            if found.starts_with("the text `") && (expected.contains("number") || expected.contains("true")) {
                hint.push_str(" (without quotes)");
            }
            Diagnostic::new(format!("{what} must be {expected}, not {found}"), location, hint)
        }
        DeErrorKind::UnknownKey { key, allowed } => unknown_key_diagnostic(&key, &path, allowed, location),
        DeErrorKind::UnknownValue { value, allowed } => {
            let key = last_key(&path).unwrap_or("value");
            let mut hint = did_you_mean(&value, allowed.iter().copied());
            push_sentence(&mut hint, &format!("write one of {}", key_list(allowed)));
            Diagnostic::new(format!("`{value}` is not a valid `{key}` (in `{dotted}`)"), location, hint)
        }
        DeErrorKind::MissingKey { key } => {
            let place = if path.is_empty() { "the workflow".to_string() } else { format!("`{dotted}`") };
            let hint = key_hint(key).map(|h| format!("add `{key}`: {h}")).unwrap_or_else(|| format!("add `{key}`"));
            Diagnostic::new(format!("{place} is missing `{key}`"), location, hint)
        }
        DeErrorKind::OutOfRange { value, bounds } => {
            let (min, max) = *bounds;
            let (side, bound, which) =
                if value.starts_with('-') { ("less", min, "smallest") } else { ("more", max, "largest") };
            let hint = hint_for_path().unwrap_or_else(|| format!("write a whole number from {min} to {max}"));
            Diagnostic::new(
                format!("`{dotted}` is out of range: {value} is {side} than {bound}, the {which} allowed"),
                location,
                hint,
            )
        }
        DeErrorKind::Custom(message) => {
            let hint = hint_for_path().unwrap_or_else(|| "see docs/src/reference/workflow-files.md".to_string());
            Diagnostic::new(format!("{message} (in `{dotted}`)"), location, hint)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_words_only() {
        assert_eq!(suggest("promt", ["prompt", "tools"]), Some("prompt"));
        assert_eq!(suggest("Raed", ["Read", "Write"]), Some("Read"));
        assert_eq!(suggest("zzzzzz", ["prompt", "tools"]), None);
        assert_eq!(suggest("survy", ["survey", "fix"]), Some("survey"));
    }
}
