//! The `publish:` key: which GitHub writes a run makes once its agents are done (a
//! review, a sticky comment, a pull request, an issue, a check run, a SARIF upload),
//! with their bounds; the [`Finding`] type whose JSON Schema is shipped in
//! `workflows/schemas/finding.schema.json`; the checks `orch validate` runs on the key;
//! and the warning when nothing in the workflow can produce findings.
//!
//! Templates here (`title`, `body`, `findings`) see `run` (`id`, `date`), `workflow`
//! (`name`), `inputs`, `answer` (the run's answer) and `agents` (every agent's result).

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diagnostic::Diagnostic;
use crate::schema::Workflow;
use crate::template;
use crate::yaml::Seg;

/// Most inline comments one review may carry.
pub const MAX_REVIEW_COMMENTS: u32 = 100;
/// Most annotations one check run may carry (posted 50 per request).
pub const MAX_CHECK_ANNOTATIONS: u32 = 1000;
/// Most results one SARIF upload may carry.
pub const MAX_SARIF_RESULTS: u32 = 5000;
/// Most labels on a pull request or an issue.
pub const MAX_LABELS: usize = 20;

/// The names a publishing template may read.
pub const PUBLISH_TEMPLATE_ROOTS: [&str; 5] = ["run", "workflow", "inputs", "answer", "agents"];

/// One finding: a problem at a place in the repository, as agents report it in the
/// `findings` array of their structured output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "orch finding", description = "One problem found at a line of a file in the repository.")]
pub struct Finding {
    /// The file, relative to the repository root, with `/` separators.
    pub path: String,
    /// The (first) line, from 1.
    #[schemars(range(min = 1))]
    pub line: u64,
    /// The last line, when the finding spans several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub end_line: Option<u64>,
    pub severity: Severity,
    /// What is wrong and why, in a sentence or two.
    pub message: String,
    /// Replacement text for the lines `line..=end_line`, posted as a suggestion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
}

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Severity {
    Error,
    Warning,
    Note,
}

impl Severity {
    pub fn as_str(&self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// The JSON Schema of one [`Finding`] (what `workflows/schemas/finding.schema.json` holds).
pub fn finding_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(Finding)).unwrap_or(Value::Null)
}

/// `publish:` as written. Every output is optional; an absent one is not published.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Publish {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<ReviewOutput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<CommentOutput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<PullRequestOutput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issue: Option<IssueOutput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_run: Option<CheckRunOutput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sarif: Option<SarifOutput>,
}

impl Publish {
    pub fn is_empty(&self) -> bool {
        *self == Publish::default()
    }

    /// Whether an output posts findings (review, check run, SARIF).
    pub fn uses_findings(&self) -> bool {
        self.review.is_some() || self.check_run.is_some() || self.sarif.is_some()
    }

    /// The `findings` expression of the review, when one is written.
    pub fn findings_template(&self) -> Option<&str> {
        self.review.as_ref().and_then(|r| r.findings.as_deref())
    }
}

/// The event of a review. orch never approves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReviewEvent {
    #[default]
    Comment,
    RequestChanges,
}

impl ReviewEvent {
    pub fn as_str(&self) -> &'static str {
        match self {
            ReviewEvent::Comment => "COMMENT",
            ReviewEvent::RequestChanges => "REQUEST_CHANGES",
        }
    }
}

fn default_max_comments() -> u32 {
    30
}

fn default_true() -> bool {
    true
}

/// `publish.review`: one pull-request review per head commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewOutput {
    #[serde(default)]
    pub event: ReviewEvent,
    /// Most inline comments; the rest are listed in the body.
    #[serde(default = "default_max_comments")]
    pub max_comments: u32,
    /// A `{{ expression }}` giving the findings; by default every agent's
    /// `output.findings`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings: Option<String>,
    /// Replaces the answer as the review's body (a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// `publish.comment`: the answer as a pull-request or issue comment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CommentOutput {
    /// Edit the comment of an earlier run instead of adding one (default true).
    #[serde(default = "default_true")]
    pub sticky: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
}

/// `publish.pull_request`: push a stable branch and open or update one pull request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PullRequestOutput {
    /// Default `orch/<workflow name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The base branch; default the repository's current branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default)]
    pub draft: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

/// `publish.issue`: open or update one issue, found again by its hidden marker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IssueOutput {
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
}

fn default_check_name() -> String {
    "orch".to_string()
}

fn default_max_annotations() -> u32 {
    500
}

fn default_max_results() -> u32 {
    1000
}

/// `publish.check_run`: a check on the head commit, with one annotation per finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckRunOutput {
    #[serde(default = "default_check_name")]
    pub name: String,
    #[serde(default = "default_max_annotations")]
    pub max_annotations: u32,
}

/// `publish.sarif`: the findings as a code-scanning upload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SarifOutput {
    /// Tells uploads of different workflows apart (`runAutomationDetails.id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    #[serde(default = "default_max_results")]
    pub max_results: u32,
}

/// Whether `name` is usable as the branch of `publish.pull_request`.
pub fn is_valid_branch(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
        && !name.starts_with(['/', '-', '.'])
        && !name.ends_with(['/', '.'])
        && !name.ends_with(".lock")
        && !name.contains("..")
        && !name.contains("//")
        && !name.contains("/.")
}

/// The default branch of `publish.pull_request` for a workflow: `orch/<name>`, with
/// every character git would refuse replaced by `-`.
pub fn default_branch(workflow_name: &str) -> String {
    let slug: String = workflow_name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c.to_ascii_lowercase() } else { '-' })
        .collect();
    let slug = slug.trim_matches('-');
    format!("orch/{}", if slug.is_empty() { "publish" } else { slug })
}

/// Renders a publishing text template (`title`, `body`) with `context`.
pub fn render_text(source: &str, context: &Value) -> Result<String, String> {
    template::render(source, context).map_err(|e| e.message)
}

/// Evaluates a `findings` template (`{{ expression }}`) with `context`.
pub fn eval_findings(source: &str, context: &Value) -> Result<Value, String> {
    let Some((expr, _)) = template::single_expression(source) else {
        return Err("`findings` must be one `{{ expression }}`".to_string());
    };
    template::eval(expr, context).map_err(|e| e.message)
}

/// Warnings for `orch validate`: outputs that post findings when no agent's output
/// schema declares a `findings` array with the fields of a [`Finding`].
pub fn findings_warnings(workflow: &Workflow) -> Vec<String> {
    let Some(publish) = &workflow.publish else { return Vec::new() };
    if !publish.uses_findings() || publish.findings_template().is_some() {
        return Vec::new();
    }
    let mut warnings = Vec::new();
    let mut producers = 0;
    for agent in &workflow.agents {
        let Some(output) = &agent.output else { continue };
        let Some(findings) = output.schema.get("properties").and_then(|p| p.get("findings")) else { continue };
        producers += 1;
        let item = findings.get("items").unwrap_or(&Value::Null);
        let declared: BTreeSet<&str> = item
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let missing: Vec<&str> =
            ["path", "line", "severity", "message"].into_iter().filter(|k| !declared.contains(k)).collect();
        if findings.get("type").and_then(Value::as_str) != Some("array") || !missing.is_empty() {
            warnings.push(format!(
                "`agents.{}.output.schema` has `findings`, but not as an array of findings (missing {}); \
                 use the schema in workflows/schemas/finding.schema.json for its items",
                agent.id,
                if missing.is_empty() { "`type: array`".to_string() } else { missing.join(", ") }
            ));
        }
    }
    if producers == 0 {
        warnings.push(
            "`publish` posts findings (review, check_run or sarif), but no agent's `output.schema` has a \
             `findings` property, so there will be none; add one (see workflows/schemas/finding.schema.json) \
             or write `publish.review.findings`"
                .to_string(),
        );
    }
    warnings
}

/// The checks of `publish:` (bounds, names, templates), placed in the file.
pub(crate) fn check(workflow: &Workflow) -> Vec<Diagnostic> {
    let Some(publish) = &workflow.publish else { return Vec::new() };
    let mut checker = Checker { workflow, diagnostics: Vec::new() };
    if let Some(review) = &publish.review {
        if review.max_comments == 0 || review.max_comments > MAX_REVIEW_COMMENTS {
            checker.error(
                &["review", "max_comments"],
                format!("`publish.review.max_comments` must be between 1 and {MAX_REVIEW_COMMENTS}"),
                "findings past the limit are listed in the review's body",
            );
        }
        if let Some(findings) = &review.findings {
            checker.findings(findings);
        }
        checker.template(review.body.as_deref(), &["review", "body"]);
    }
    if let Some(comment) = &publish.comment {
        checker.template(comment.body.as_deref(), &["comment", "body"]);
    }
    if let Some(pr) = &publish.pull_request {
        if let Some(branch) = &pr.branch
            && !is_valid_branch(branch)
        {
            checker.error(
                &["pull_request", "branch"],
                format!("`{branch}` is not a usable branch name"),
                "use letters, digits, `.`, `_`, `-` and `/`, e.g. `orch/nightly-refactor`",
            );
        }
        if let Some(base) = &pr.base
            && !is_valid_branch(base)
        {
            checker.error(
                &["pull_request", "base"],
                format!("`{base}` is not a usable branch name"),
                "name an existing branch, e.g. `main`",
            );
        }
        checker.template(pr.title.as_deref(), &["pull_request", "title"]);
        checker.template(pr.body.as_deref(), &["pull_request", "body"]);
        checker.labels(&pr.labels, "pull_request");
    }
    if let Some(issue) = &publish.issue {
        if issue.title.trim().is_empty() || issue.title.chars().count() > 256 {
            checker.error(
                &["issue", "title"],
                "`publish.issue.title` must be 1 to 256 characters",
                "write a short title",
            );
        }
        checker.template(Some(&issue.title), &["issue", "title"]);
        checker.template(issue.body.as_deref(), &["issue", "body"]);
        checker.labels(&issue.labels, "issue");
    }
    if let Some(check) = &publish.check_run {
        if check.name.trim().is_empty() || check.name.chars().count() > 100 {
            checker.error(
                &["check_run", "name"],
                "`publish.check_run.name` must be 1 to 100 characters",
                "e.g. `name: orch`",
            );
        }
        if check.max_annotations == 0 || check.max_annotations > MAX_CHECK_ANNOTATIONS {
            checker.error(
                &["check_run", "max_annotations"],
                format!("`publish.check_run.max_annotations` must be between 1 and {MAX_CHECK_ANNOTATIONS}"),
                "findings past the limit are counted in the check's summary",
            );
        }
    }
    if let Some(sarif) = &publish.sarif {
        if sarif.max_results == 0 || sarif.max_results > MAX_SARIF_RESULTS {
            checker.error(
                &["sarif", "max_results"],
                format!("`publish.sarif.max_results` must be between 1 and {MAX_SARIF_RESULTS}"),
                "findings past the limit are left out of the upload",
            );
        }
        if let Some(category) = &sarif.category
            && (category.is_empty() || category.chars().any(char::is_whitespace))
        {
            checker.error(
                &["sarif", "category"],
                "`publish.sarif.category` must be one word",
                "e.g. `category: orch-review`",
            );
        }
    }
    checker.diagnostics
}

struct Checker<'a> {
    workflow: &'a Workflow,
    diagnostics: Vec<Diagnostic>,
}

impl Checker<'_> {
    fn segs(parts: &[&str]) -> Vec<Seg> {
        std::iter::once("publish").chain(parts.iter().copied()).map(Seg::key).collect()
    }

    fn location(&self, parts: &[&str]) -> crate::diagnostic::Location {
        self.workflow.source.locate(&Checker::segs(parts))
    }

    fn error(&mut self, parts: &[&str], message: impl Into<String>, hint: impl Into<String>) {
        let at = self.location(parts);
        self.diagnostics.push(Diagnostic::new(message, at, hint));
    }

    fn labels(&mut self, labels: &[String], output: &str) {
        if labels.len() > MAX_LABELS || labels.iter().any(|l| l.trim().is_empty() || l.chars().count() > 50) {
            self.error(
                &[output, "labels"],
                format!("`publish.{output}.labels` takes at most {MAX_LABELS} labels of 1 to 50 characters"),
                "e.g. `labels: [orch]`",
            );
        }
    }

    fn findings(&mut self, text: &str) {
        let Some((expr, _)) = template::single_expression(text) else {
            self.error(
                &["review", "findings"],
                "`publish.review.findings` must be one quoted `{{ expression }}`",
                "e.g. `findings: \"{{ agents.review.output.findings }}\"`",
            );
            return;
        };
        match template::expression_references(expr) {
            Ok(refs) => self.references(&refs, &["review", "findings"]),
            Err(e) => self.error(
                &["review", "findings"],
                format!("bad expression in `publish.review.findings`: {}", e.message),
                "check the expression's syntax",
            ),
        }
    }

    fn template(&mut self, text: Option<&str>, parts: &[&str]) {
        let Some(text) = text else { return };
        match template::references(text) {
            Ok(refs) => self.references(&refs, parts),
            Err(e) => self.error(
                parts,
                format!("bad template in `publish.{}`: {}", parts.join("."), e.message),
                "close every `{{` with `}}` and every `{%` with `%}`",
            ),
        }
    }

    fn references(&mut self, refs: &[template::Reference], parts: &[&str]) {
        for reference in refs {
            let root = reference.root();
            if !PUBLISH_TEMPLATE_ROOTS.contains(&root) {
                self.error(
                    parts,
                    format!("unknown variable `{root}` in `publish.{}`", parts.join(".")),
                    "a publishing template can read `run.id`, `run.date`, `workflow.name`, `inputs.<name>`, `answer` and `agents.<id>`",
                );
            } else if root == "agents"
                && let Some(id) = reference.parts.get(1)
                && self.workflow.agent(id).is_none()
            {
                self.error(
                    parts,
                    format!("unknown agent `{id}` in `publish.{}`", parts.join(".")),
                    "name an agent of this workflow",
                );
            } else if root == "inputs"
                && let Some(name) = reference.parts.get(1)
                && !self.workflow.inputs.iter().any(|i| &i.name == name)
            {
                self.error(
                    parts,
                    format!("unknown input `{name}` in `publish.{}`", parts.join(".")),
                    "declare it under `inputs:`",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_schema_matches_the_type() {
        // `ORCH_BLESS_SCHEMAS=1 cargo test -p orch-workflows shipped_schema` rewrites the file.
        if std::env::var_os("ORCH_BLESS_SCHEMAS").is_some() {
            let text = serde_json::to_string_pretty(&finding_schema()).expect("a schema serializes") + "\n";
            std::fs::write(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/finding.schema.json"), text)
                .expect("write the schema");
        }
        let shipped: Value = serde_json::from_str(
            &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/finding.schema.json"))
                .expect("the shipped schema"),
        )
        .expect("the shipped schema is JSON");
        assert_eq!(shipped, finding_schema(), "regenerate workflows/schemas/finding.schema.json from `Finding`");
    }

    #[test]
    fn the_schema_accepts_a_finding_and_rejects_a_bad_severity() {
        let schema = finding_schema();
        let validator = jsonschema::validator_for(&schema).expect("a valid schema");
        let good =
            serde_json::json!({"path": "a.rs", "line": 3, "severity": "error", "message": "m", "suggestion": "x"});
        assert!(validator.is_valid(&good));
        let bad = serde_json::json!({"path": "a.rs", "line": 3, "severity": "fatal", "message": "m"});
        assert!(!validator.is_valid(&bad));
        let zero = serde_json::json!({"path": "a.rs", "line": 0, "severity": "note", "message": "m"});
        assert!(!validator.is_valid(&zero));
    }

    const WORKFLOW: &str = "version: 1\nname: pr review\nagents:\n  review:\n    prompt: Review.\n    output:\n      schema:\n        type: object\n        properties:\n          findings: { type: array, items: { type: object, properties: { path: {}, line: {}, severity: {}, message: {} } } }\n";

    fn load(publish: &str) -> Result<Workflow, Vec<Diagnostic>> {
        crate::load_str(&format!("{WORKFLOW}publish:\n{publish}"), "w.yml")
    }

    #[test]
    fn loads_every_output() {
        let w = load(
            "  review: { event: REQUEST_CHANGES, max_comments: 5, findings: \"{{ agents.review.output.findings }}\" }\n  comment: {}\n  pull_request: { branch: orch/x, title: \"Refactor {{ run.date }}\", draft: true, labels: [orch] }\n  issue: { title: Report, labels: [orch] }\n  check_run: {}\n  sarif: { category: orch }\n",
        )
        .unwrap();
        let p = w.publish.as_ref().unwrap();
        assert_eq!(p.review.as_ref().unwrap().event, ReviewEvent::RequestChanges);
        assert!(p.comment.as_ref().unwrap().sticky);
        assert_eq!(p.check_run.as_ref().unwrap().name, "orch");
        assert!(findings_warnings(&w).is_empty());
    }

    #[test]
    fn rejects_what_cannot_be_published() {
        let errors = load("  review: { event: APPROVE }\n").unwrap_err();
        assert!(errors[0].message.contains("APPROVE"), "{errors:?}");
        let errors = load("  review: { max_comments: 500 }\n  pull_request: { branch: \"a b\" }\n  issue: { title: \"{{ nope }}\" }\n").unwrap_err();
        let messages: Vec<&str> = errors.iter().map(|d| d.message.as_str()).collect();
        assert!(messages.iter().any(|m| m.contains("max_comments")), "{messages:?}");
        assert!(messages.iter().any(|m| m.contains("`a b`")), "{messages:?}");
        assert!(messages.iter().any(|m| m.contains("unknown variable `nope`")), "{messages:?}");
        let errors = load("  comments: {}\n").unwrap_err();
        assert!(errors[0].message.contains("unknown key `comments`"), "{errors:?}");
    }

    #[test]
    fn warns_when_nothing_produces_findings() {
        let text = "version: 1\nagents:\n  a: { prompt: x }\npublish:\n  check_run: {}\n";
        let w = crate::load_str(text, "w.yml").unwrap();
        let warnings = findings_warnings(&w);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("no agent's `output.schema`"));
        let text = "version: 1\nagents:\n  a: { prompt: x, output: { schema: { type: object, properties: { findings: { type: array, items: { type: object, properties: { path: {} } } } } } } }\npublish:\n  sarif: {}\n";
        let warnings = findings_warnings(&crate::load_str(text, "w.yml").unwrap());
        assert!(warnings[0].contains("missing line, severity, message"), "{warnings:?}");
    }

    #[test]
    fn evaluates_findings_and_texts() {
        let ctx = serde_json::json!({"agents": {"a": {"output": {"findings": [{"path": "x"}]}}}, "run": {"date": "2026-11-30"}});
        assert_eq!(eval_findings("{{ agents.a.output.findings }}", &ctx).unwrap(), serde_json::json!([{"path": "x"}]));
        assert_eq!(render_text("On {{ run.date }}", &ctx).unwrap(), "On 2026-11-30");
        assert!(eval_findings("agents.a", &ctx).is_err());
        let fan_out =
            serde_json::json!({"agents": {"r": [{"output": {"findings": [1, 2]}}, {"output": {"findings": [3]}}]}});
        let all = eval_findings("{{ agents.r | map(attribute='output.findings') | flatten }}", &fan_out).unwrap();
        assert_eq!(all, serde_json::json!([1, 2, 3]));
    }

    #[test]
    fn branches_are_checked() {
        assert!(is_valid_branch("orch/nightly-refactor"));
        assert!(!is_valid_branch("orch/../x"));
        assert!(!is_valid_branch("-x"));
        assert!(!is_valid_branch("a b"));
        assert!(!is_valid_branch("x.lock"));
        assert_eq!(default_branch("Nightly refactor!"), "orch/nightly-refactor");
    }
}
