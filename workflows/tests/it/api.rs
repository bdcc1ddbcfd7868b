//! The public API: loading, planning with inputs, templates, fan-out (static and
//! dynamic), prompts rendered from earlier results, durations, file order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration as StdDuration;

use orch_workflows::{
    AgentSpec, Backend, Diagnostic, Duration, DynamicFanOut, ForEach, Inputs, NetworkSetting, PermissionMode, Plan,
    PlanNode, Prompt, RunContext, Workflow, expand_dynamic, fan_out_ids, load, load_str, plan, render_diagnostics,
    render_prompt,
};
use serde_json::{Value, json};

fn workflow(text: &str) -> Workflow {
    load_str(text, "wf.yaml").unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)))
}

fn planned(text: &str, inputs: &[(&str, Value)]) -> Plan {
    let inputs: Inputs = inputs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    plan(&workflow(text), &inputs).unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)))
}

fn plan_errors(text: &str, inputs: &[(&str, Value)]) -> Vec<Diagnostic> {
    let inputs: Inputs = inputs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    plan(&workflow(text), &inputs).unwrap_err()
}

fn spec<'p>(plan: &'p Plan, id: &str) -> &'p AgentSpec {
    plan.agents().find(|a| a.id == id).unwrap_or_else(|| panic!("no agent {id}"))
}

fn dynamic<'p>(plan: &'p Plan, id: &str) -> &'p DynamicFanOut {
    plan.nodes()
        .find_map(|n| match n {
            PlanNode::DynamicFanOut(d) if d.id == id => Some(d),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no dynamic fan-out {id}"))
}

fn rendered(spec: &AgentSpec) -> &str {
    match &spec.prompt {
        Some(Prompt::Rendered { text }) => text,
        other => panic!("{} has no rendered prompt: {other:?}", spec.id),
    }
}

const SWEEP: &str = r#"
version: 1
inputs:
  lint: { default: clippy }
agents:
  survey:
    prompt: List the crates with {{ inputs.lint }} warnings.
    output:
      schema:
        type: object
        properties:
          crates: { type: array, items: { type: string } }
          notes: { type: string }
  fix:
    needs: [survey]
    for_each: "{{ agents.survey.output.crates }}"
    as: crate
    prompt: Fix the {{ inputs.lint }} warnings in {{ crate }}.
  explain:
    needs: [survey]
    for_each: "{{ agents.survey.output.crates }}"
    prompt: "Explain {{ item }} given: {{ agents.survey.output.notes }}"
  report:
    needs: [fix]
    prompt: |
      {% for r in agents.fix %}{{ r.item }}={{ r.text }} {% endfor %}
"#;

#[test]
fn agents_keep_file_order() {
    let wf = workflow(
        "version: 1\nagents:\n  zeta: { prompt: z }\n  alpha: { prompt: a }\n  mid: { prompt: m }\n  beta: { prompt: b }\n",
    );
    let ids: Vec<&str> = wf.agents.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["zeta", "alpha", "mid", "beta"]);
    let plan = plan(&wf, &Inputs::new()).unwrap();
    let planned: Vec<&str> = plan.agents().map(|a| a.id.as_str()).collect();
    assert_eq!(planned, ["zeta", "alpha", "mid", "beta"]);
}

#[test]
fn stages_follow_needs_then_file_order() {
    let plan = planned(
        "version: 1\nagents:\n  c: { prompt: c, needs: [b] }\n  b: { prompt: b, needs: [a] }\n  a: { prompt: a }\n  \
         d: { prompt: d }\n  e: { prompt: e, needs: [a, d] }\n",
        &[],
    );
    let stages: Vec<Vec<&str>> = plan.stages.iter().map(|s| s.agents.iter().map(PlanNode::id).collect()).collect();
    assert_eq!(stages, [vec!["a", "d"], vec!["b", "e"], vec!["c"]]);
}

#[test]
fn the_workflow_name_defaults_to_the_file_name() {
    let wf = load_str("version: 1\nagents:\n  a: { prompt: x }\n", "ci/nightly-sweep.yaml").unwrap();
    assert_eq!(wf.name, "nightly-sweep");
    assert_eq!(wf.file(), "ci/nightly-sweep.yaml");
}

#[test]
fn load_reads_files() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/valid/clippy_sweep.yaml");
    let wf = load(&path).unwrap();
    assert_eq!(wf.name, "clippy-sweep");
    assert!(matches!(&wf.agents[1].for_each, Some(ForEach::Expr(e)) if e.contains("agents.survey.output.crates")));
}

#[test]
fn settings_merge_with_defaults() {
    let plan = planned(
        r#"
version: 1
model: top-model
defaults:
  model: default-model
  tools: [Read, Grep]
  sandbox: { backend: container, image: "rust:1", network: none, read: [/a] }
  limits: { max_turns: 40, timeout: 10m }
  permissions: { mode: plan, deny: ["Bash(git push *)"] }
agents:
  one:
    prompt: x
    model: own-model
    tools: [Read, Edit, Read]
    sandbox: { network: full, read: [/b, /a] }
    limits: { max_turns: 5 }
    permissions: { allow: ["Edit(src/**)"], deny: ["Bash(rm *)"] }
  two:
    prompt: y
    sandbox: { backend: landlock }
"#,
        &[],
    );
    let one = spec(&plan, "one");
    assert_eq!(one.model.as_deref(), Some("own-model"));
    assert_eq!(one.tools, ["Read", "Edit"]);
    assert_eq!(one.sandbox.backend, Backend::Container);
    assert_eq!(one.sandbox.network, NetworkSetting::Full);
    assert_eq!(one.sandbox.image.as_deref(), Some("rust:1"));
    assert_eq!(one.sandbox.read, ["/a", "/b"]);
    assert_eq!(one.limits.max_turns, Some(5));
    assert_eq!(one.limits.timeout.unwrap().as_std(), StdDuration::from_secs(600));
    assert_eq!(one.permissions.mode, Some(PermissionMode::Plan));
    assert_eq!(one.permissions.allow, ["Edit(src/**)"]);
    assert_eq!(one.permissions.deny, ["Bash(git push *)", "Bash(rm *)"]);
    let two = spec(&plan, "two");
    assert_eq!(two.model.as_deref(), Some("default-model"));
    assert_eq!(two.tools, ["Read", "Grep"]);
    assert_eq!(two.sandbox.backend, Backend::Landlock);
    assert_eq!(two.sandbox.image, None, "an image only applies to containers");
    assert_eq!(plan.synthesis.model.as_deref(), Some("top-model"));
}

#[test]
fn durations_in_limits() {
    let plan = planned(
        "version: 1\nlimits: { timeout: 1h30m }\nagents:\n  a: { prompt: x, limits: { timeout: 500ms } }\n  \
         b: { prompt: y, limits: { timeout: 2m 30s } }\n",
        &[],
    );
    assert_eq!(plan.limits.timeout.unwrap().as_std(), StdDuration::from_secs(5400));
    assert_eq!(spec(&plan, "a").limits.timeout.unwrap().as_std(), StdDuration::from_millis(500));
    assert_eq!(spec(&plan, "b").limits.timeout.unwrap().to_string(), "2m30s");
    assert_eq!(Duration::parse("90s").unwrap().to_string(), "1m30s");
    // One grammar with the command line: fractions and bare seconds are read too.
    let plan =
        planned("version: 1\nlimits: { timeout: 1.5h }\nagents:\n  a: { prompt: x, limits: { timeout: 90 } }\n", &[]);
    assert_eq!(plan.limits.timeout.unwrap().to_string(), "1h30m");
    assert_eq!(spec(&plan, "a").limits.timeout.unwrap().as_std(), StdDuration::from_secs(90));
    let err = Duration::parse("10 parsecs").unwrap_err();
    assert_eq!(err.to_string(), "`10 parsecs` is not a duration: unknown unit `parsecs`");
}

#[test]
fn inputs_come_from_the_command_line_or_defaults() {
    let text = "version: 1\ninputs:\n  target: { description: The crate }\n  mode: { default: quick }\nagents:\n  \
                a: { prompt: \"{{ inputs.mode }} review of {{ inputs.target }}\" }\n";
    let plan = planned(text, &[("target", json!("core"))]);
    assert_eq!(rendered(spec(&plan, "a")), "quick review of core");
    assert!(!plan.inputs[0].default);
    assert!(plan.inputs[1].default);
    let plan = planned(text, &[("target", json!("cli")), ("mode", json!("deep"))]);
    assert_eq!(rendered(spec(&plan, "a")), "deep review of cli");
}

#[test]
fn missing_and_unknown_inputs_are_plan_errors() {
    let text = "version: 1\ninputs:\n  target: { description: The crate to review }\nagents:\n  \
                a: { prompt: \"{{ inputs.target }}\" }\n";
    let errors = plan_errors(text, &[("tagret", json!("x"))]);
    let rendered = render_diagnostics(&errors);
    insta::assert_snapshot!(rendered, @r#"
    error: the input `target` is required
     --> wf.yaml:3:3
      |
    3 |   target: { description: The crate to review }
      |   ^^^^^^
      = note: `target`: The crate to review
      = help: pass `--input target=VALUE`, or give it a `default:`

    error: unknown input `tagret`
     --> wf.yaml:2:1
      |
    2 | inputs:
      | ^^^^^^
      = help: did you mean `target`? The declared inputs are `target`
    "#);
}

#[test]
fn static_fan_out_expands_before_the_run() {
    let plan = planned(
        "version: 1\nagents:\n  fix:\n    for_each: [crates/core, crates/cli, { name: Docs Site, dir: site }]\n    \
         as: target\n    prompt: \"Fix {{ target.name if target is mapping else target }}\"\n  \
         after:\n    needs: [fix]\n    prompt: done\n",
        &[],
    );
    let ids: Vec<&str> = plan.stages[0].agents.iter().map(PlanNode::id).collect();
    assert_eq!(ids, ["fix/crates-core", "fix/crates-cli", "fix/docs-site"]);
    let first = spec(&plan, "fix/crates-core");
    assert_eq!(first.agent, "fix");
    assert_eq!(first.fan_out.as_ref().unwrap().item, json!("crates/core"));
    assert_eq!(rendered(first), "Fix crates/core");
    assert_eq!(rendered(spec(&plan, "fix/docs-site")), "Fix Docs Site");
    assert_eq!(spec(&plan, "after").needs, ["fix"]);
}

#[test]
fn fan_out_ids_are_unique_stable_and_branch_safe() {
    let items = [json!("a b"), json!("a-b"), json!("A B"), json!(null), json!("..lock"), json!("x/../y")];
    let ids = fan_out_ids("fix", &items);
    assert_eq!(ids, ["fix/a-b", "fix/a-b-1", "fix/a-b-2", "fix/3", "fix/lock", "fix/x-y"]);
    assert_eq!(ids, fan_out_ids("fix", &items), "same items, same ids");
    for id in &ids {
        let (_, slug) = id.split_once('/').unwrap();
        assert!(slug.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_'));
        assert!(!slug.starts_with('-') && !slug.ends_with('-') && !slug.is_empty());
    }
}

#[test]
fn dynamic_fan_out_is_a_placeholder_until_its_source_is_done() {
    let plan = planned(SWEEP, &[]);
    let fix = dynamic(&plan, "fix");
    assert_eq!(fix.source, "agents.survey.output.crates");
    assert_eq!(fix.source_agent, "survey");
    assert_eq!(fix.needs, ["survey"]);
    assert_eq!(fix.as_name, "crate");
    assert_eq!(plan.stages.len(), 3);

    let output = json!({ "crates": ["orch-agents", "orch sandbox"], "notes": "mostly lints" });
    let specs = expand_dynamic(fix, &output).unwrap();
    let ids: Vec<&str> = specs.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["fix/orch-agents", "fix/orch-sandbox"]);
    assert_eq!(rendered(&specs[1]), "Fix the clippy warnings in orch sandbox.");
    assert_eq!(specs[1].fan_out.as_ref().unwrap().index, 1);
    assert_eq!(specs[0].needs, ["survey"]);
}

#[test]
fn dynamic_fan_out_of_an_empty_list_has_no_agents() {
    let plan = planned(SWEEP, &[]);
    assert!(expand_dynamic(dynamic(&plan, "fix"), &json!({ "crates": [] })).unwrap().is_empty());
}

#[test]
fn dynamic_fan_out_needs_a_list() {
    let plan = planned(SWEEP, &[]);
    let fix = dynamic(&plan, "fix");
    let err = expand_dynamic(fix, &json!({ "crates": "core" })).unwrap_err();
    insta::assert_snapshot!(err.render(), @r#"
    error: `for_each` of `fix` needs a list, but `agents.survey.output.crates` is the text `core`
      --> wf.yaml:16:15
       |
    16 |     for_each: "{{ agents.survey.output.crates }}"
       |               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
       = help: declare that field with `type: array` in the output schema of `survey`
    "#);
    let err = expand_dynamic(fix, &json!({ "other": [] })).unwrap_err();
    assert_eq!(err.message, "cannot expand `for_each` of `fix`: `agents.survey.output.crates` is undefined");
    assert_eq!(err.location.line, 16);
}

#[test]
fn deferred_prompts_render_with_earlier_results() {
    let plan = planned(SWEEP, &[]);
    let survey = spec(&plan, "survey");
    assert_eq!(rendered(survey), "List the crates with clippy warnings.");
    let output = json!({ "crates": ["core", "cli"], "notes": "two crates" });

    // A dynamic fan-out whose prompt also reads an earlier output stays a template.
    let explain = expand_dynamic(dynamic(&plan, "explain"), &output).unwrap();
    assert!(matches!(&explain[0].prompt, Some(Prompt::Deferred { reads, .. }) if reads == &["survey"]));
    let mut context = RunContext::new(&plan);
    context.record(survey, "I found two crates.", Some(&output));
    assert_eq!(render_prompt(&explain[1], &context).unwrap().unwrap(), "Explain cli given: two crates");

    // A fan-out's results are a list, in item order, whatever order they finish in.
    let fixes = expand_dynamic(dynamic(&plan, "fix"), &output).unwrap();
    let report = spec(&plan, "report");
    assert!(matches!(&report.prompt, Some(Prompt::Deferred { reads, .. }) if reads == &["fix"]));
    context.record(&fixes[1], "fixed cli", None);
    context.record(&fixes[0], "fixed core", None);
    assert_eq!(render_prompt(report, &context).unwrap().unwrap(), "core=fixed core cli=fixed cli \n");
    assert_eq!(
        context.agents()["fix"],
        json!([
            { "id": "fix/core", "item": "core", "text": "fixed core", "output": null },
            { "id": "fix/cli", "item": "cli", "text": "fixed cli", "output": null }
        ])
    );
}

#[test]
fn a_fan_out_with_no_results_yet_is_an_empty_list() {
    let plan = planned(SWEEP, &[]);
    let context = RunContext::new(&plan);
    assert_eq!(render_prompt(spec(&plan, "report"), &context).unwrap().unwrap(), "\n");
}

#[test]
fn rendering_is_strict() {
    let plan = planned(SWEEP, &[]);
    let output = json!({ "crates": ["core"] });
    let explain = expand_dynamic(dynamic(&plan, "explain"), &output).unwrap();
    let mut context = RunContext::new(&plan);
    // `notes` is optional in the schema and missing from this output: an error, not "".
    context.record(spec(&plan, "survey"), "done", Some(&output));
    let err = render_prompt(&explain[0], &context).unwrap_err();
    insta::assert_snapshot!(err.render(), @r#"
    error: cannot render the prompt of `explain/core`: `agents.survey.output.notes` is undefined
      --> wf.yaml:22:43
       |
    22 |     prompt: "Explain {{ item }} given: {{ agents.survey.output.notes }}"
       |                                           ^^^^^^^^^^^^^^^^^^^^^^^^^^
       = help: every name a template reads must have a value: check the inputs given, the item, and the earlier agents' results
    "#);
    // Nothing recorded at all: the earlier agent is missing.
    let err = render_prompt(&explain[0], &RunContext::new(&plan)).unwrap_err();
    assert!(err.message.contains("is undefined"), "{}", err.message);
}

#[test]
fn prompts_are_text_not_html() {
    let plan = planned(
        "version: 1\ninputs:\n  x: { default: \"<a href='y'>&</a>\" }\nagents:\n  a:\n    prompt: |\n      \
         Keep {{ inputs.x }} as is.\n",
        &[],
    );
    assert_eq!(rendered(spec(&plan, "a")), "Keep <a href='y'>&</a> as is.\n");
}

#[test]
fn for_each_over_inputs_expands_at_plan_time() {
    let text = "version: 1\ninputs:\n  crates: { default: [core, cli] }\nagents:\n  fix:\n    \
                for_each: \"{{ inputs.crates }}\"\n    prompt: Fix {{ item }}.\n";
    let plan = planned(text, &[]);
    assert_eq!(plan.agents().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["fix/core", "fix/cli"]);
    let plan = planned(text, &[("crates", json!("a, b, c"))]);
    assert_eq!(plan.agents().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["fix/a", "fix/b", "fix/c"]);
    // Lines (as from `git ls-files`): one item per non-empty line, commas kept.
    let plan = planned(text, &[("crates", json!("src/a.rs\n\n  src/b,c.rs\r\nsrc/d.rs\n"))]);
    let items: Vec<&serde_json::Value> = plan.agents().map(|a| &a.fan_out.as_ref().unwrap().item).collect();
    assert_eq!(items, [&json!("src/a.rs"), &json!("src/b,c.rs"), &json!("src/d.rs")]);
    let plan = planned(text, &[("crates", json!(r#"["x", {"name": "y"}]"#))]);
    assert_eq!(plan.agents().map(|a| a.id.as_str()).collect::<Vec<_>>(), ["fix/x", "fix/y"]);
    let errors = plan_errors(text, &[("crates", json!({ "a": 1 }))]);
    assert_eq!(errors[0].message, "`for_each` of `fix` needs a list, but `inputs.crates` is an object");
    assert_eq!((errors[0].location.line, errors[0].location.column), (6, 19));
}

#[test]
fn uses_without_prompt_has_no_prompt() {
    let plan = planned("version: 1\nagents:\n  a: { uses: reviewer }\n", &[]);
    let a = spec(&plan, "a");
    assert_eq!(a.uses.as_deref(), Some("reviewer"));
    assert_eq!(a.prompt, None);
    assert_eq!(render_prompt(a, &RunContext::new(&plan)).unwrap(), None);
}

#[test]
fn templates_may_read_agents_needed_through_others() {
    let plan = planned(
        "version: 1\nagents:\n  a: { prompt: x }\n  b: { prompt: y, needs: [a] }\n  \
         c: { prompt: \"{{ agents.a.text }}\", needs: [b] }\n",
        &[],
    );
    let mut context = RunContext::new(&plan);
    context.record(spec(&plan, "a"), "from a", None);
    assert_eq!(render_prompt(spec(&plan, "c"), &context).unwrap().unwrap(), "from a");
}

#[test]
fn defaults_fill_what_the_file_leaves_out() {
    let plan = planned("version: 1\nagents:\n  a: { prompt: x }\n", &[]);
    let a = spec(&plan, "a");
    assert_eq!(a.tools, orch_workflows::DEFAULT_TOOLS);
    assert_eq!(a.sandbox.backend, Backend::Landlock);
    assert_eq!(a.sandbox.network, NetworkSetting::None);
    assert_eq!(a.model, None);
    // Every agent gets the default turn and time limits (issue 18).
    assert_eq!(a.limits, orch_workflows::default_agent_limits());
    assert_eq!(plan.integrate.mode, orch_workflows::IntegrateMode::Branches);
    assert!(!plan.fail_fast);
}

#[test]
fn yaml_1_2_scalars() {
    // `no`, `on` and `yes` are text in YAML 1.2; quoted numbers are text.
    let plan = planned(
        "version: 1\nagents:\n  a:\n    for_each: [no, on, yes, \"1\", 1.5]\n    prompt: \"{{ item }}\"\n",
        &[],
    );
    let prompts: Vec<&str> = plan.agents().map(rendered).collect();
    assert_eq!(prompts, ["no", "on", "yes", "1", "1.5"]);
}

/// The example of the book's "Workflow files" page loads and plans, and a typo in it
/// gives the error the page shows.
#[test]
fn the_docs_example_is_valid() {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/reference/workflow-files.md"),
    )
    .unwrap();
    let section = &page[page.find("# Workflow files").expect("the page has its Workflow files heading")..];
    let start = section.find("```yaml\n").unwrap() + "```yaml\n".len();
    let example = &section[start..start + section[start..].find("```").unwrap()];
    let wf = load_str(example, "clippy.yaml").unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)));
    let plan = plan(&wf, &Inputs::new()).unwrap();
    assert_eq!(plan.stages.len(), 3);
    assert_eq!(rendered(spec(&plan, "survey")), "List the crates that have `clippy::all` warnings.");

    let typo = example.replacen("needs: [survey]", "needs: [survy]", 1);
    let shown = render_diagnostics(&load_str(&typo, "clippy.yaml").unwrap_err());
    let start = section.find("```text\n").unwrap() + "```text\n".len();
    let expected = &section[start..start + section[start..].find("```").unwrap()];
    assert_eq!(shown, expected);
}

#[test]
fn crlf_files_have_the_same_positions() {
    let text = "version: 1\r\nagents:\r\n  a:\r\n    prompt: x\r\n    tools: [Nope]\r\n";
    let diagnostics = load_str(text, "wf.yaml").unwrap_err();
    assert_eq!((diagnostics[0].location.line, diagnostics[0].location.column), (5, 13));
    assert_eq!(diagnostics[0].location.source_line, "    tools: [Nope]");
}

#[test]
fn the_instructions_switch_defaults_on_and_an_agent_overrides_it() {
    let on = planned("version: 1\nname: w\nagents:\n  a:\n    prompt: go\n", &[]);
    assert!(spec(&on, "a").instructions);
    let text = "version: 1\nname: w\ndefaults:\n  instructions: false\nagents:\n  a:\n    prompt: go\n  b:\n    prompt: go\n    instructions: true\n";
    let off = planned(text, &[]);
    assert!(!spec(&off, "a").instructions);
    assert!(spec(&off, "b").instructions);
}

const PR_REVIEW: &str = r#"
version: 1
agents:
  review:
    for_each: "{{ pr.changed_files }}"
    as: file
    prompt: |
      Review {{ file }} in pull request {{ pr.number }}.
      {{ pr.diffs[file] }}
  later:
    needs: [review]
    prompt: "{{ agents.review | length }} reviews of {{ pr.changed_files | join(', ') }}"
synthesis:
  prompt: Summarize the review of {{ pr.changed_files | length }} files.
"#;

fn pr_builtins() -> orch_workflows::Builtins {
    orch_workflows::Builtins {
        pr: Some(json!({
            "number": 12,
            "changed_files": ["src/app.py", "docs/a.md"],
            "diffs": { "src/app.py": "+print(2)", "docs/a.md": "+new" },
        })),
    }
}

#[test]
fn builtins_give_pr_to_fan_outs_prompts_and_synthesis() {
    let wf = workflow(PR_REVIEW);
    assert!(orch_workflows::reads_builtin(&wf, "pr"));
    assert!(!orch_workflows::reads_builtin(&workflow(SWEEP), "pr"));
    let plan = orch_workflows::plan_with(&wf, &Inputs::default(), &pr_builtins())
        .unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)));
    let ids: Vec<&str> = plan.agents().map(|a| a.id.as_str()).filter(|id| id.starts_with("review/")).collect();
    assert_eq!(ids, ["review/src-app-py", "review/docs-a-md"]);
    assert_eq!(rendered(spec(&plan, "review/src-app-py")), "Review src/app.py in pull request 12.\n+print(2)\n");
    assert_eq!(plan.synthesis.prompt.as_deref(), Some("Summarize the review of 2 files."));
    // A deferred prompt sees `pr` too once its needs are done.
    let mut context = RunContext::new(&plan);
    for review in plan.agents().filter(|a| a.agent == "review") {
        context.record(review, "ok", None);
    }
    let later = render_prompt(spec(&plan, "later"), &context).unwrap();
    assert_eq!(later.as_deref(), Some("2 reviews of src/app.py, docs/a.md"));
    // `orch plan` shows it.
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["pr"]["number"], 12);
    assert!(orch_workflows::render_text(&plan).contains("changed_files (2): src/app.py, docs/a.md"));
}

#[test]
fn pr_in_a_dynamic_fan_out_prompt() {
    let text = r#"
version: 1
agents:
  survey:
    prompt: pick
    output: { schema: { type: object, properties: { items: { type: array } } } }
  fix:
    needs: [survey]
    for_each: "{{ agents.survey.output.items }}"
    prompt: "{{ item }} of {{ pr.changed_files | length }}"
"#;
    let plan = orch_workflows::plan_with(&workflow(text), &Inputs::default(), &pr_builtins()).unwrap();
    let specs = expand_dynamic(dynamic(&plan, "fix"), &json!({ "items": ["a"] })).unwrap();
    assert_eq!(rendered(&specs[0]), "a of 2");
}

#[test]
fn pr_without_a_pull_request_says_how_to_give_one() {
    let errors = plan_errors(PR_REVIEW, &[]);
    let shown = render_diagnostics(&errors);
    assert!(shown.contains("`pr"), "{shown}");
    assert!(shown.contains("--diff-base REV"), "{shown}");
    // A guarded use plans without it.
    let guarded =
        "version: 1\nagents:\n  a:\n    prompt: \"{% if pr is defined %}{{ pr.diff }}{% else %}all{% endif %}\"\n";
    assert_eq!(rendered(spec(&planned(guarded, &[]), "a")), "all");
}

#[test]
fn unknown_pr_fields_are_validation_errors() {
    let text = "version: 1\nagents:\n  a: { prompt: \"{{ pr.changed_file }}\" }\n";
    let shown = render_diagnostics(&load_str(text, "wf.yaml").unwrap_err());
    assert!(shown.contains("unknown field `pr.changed_file`"), "{shown}");
    assert!(shown.contains("changed_files"), "{shown}");
    let fan_out = "version: 1\nagents:\n  a: { for_each: \"{{ pr.files }}\", prompt: \"{{ item }}\" }\n";
    let shown = render_diagnostics(&load_str(fan_out, "wf.yaml").unwrap_err());
    assert!(shown.contains("unknown field `pr.files`"), "{shown}");
}

/// Issue 17: `base: needs`, `expect`, and `integrate` in both its forms.
#[test]
fn base_expect_and_integrate_keys() {
    let text = "version: 1\ndefaults:\n  expect: { changes: true }\nagents:\n  a: { prompt: x }\n  b: { prompt: y, \
                needs: [a], base: needs, expect: { changes: false } }\nintegrate:\n  mode: squash\n  message: \
                \"{{ agent.id }}: {{ agent.text }}\"\n  prune: true\n";
    let plan = planned(text, &[]);
    assert_eq!(spec(&plan, "a").base, orch_workflows::Base::Run);
    assert_eq!(spec(&plan, "b").base, orch_workflows::Base::Needs);
    assert_eq!(spec(&plan, "a").expect.changes, Some(true));
    assert_eq!(spec(&plan, "b").expect.changes, Some(false));
    assert_eq!(plan.integrate.mode, orch_workflows::IntegrateMode::Squash);
    assert!(plan.integrate.prune);
    let message = plan.integrate.message.as_deref().unwrap();
    let rendered = orch_workflows::render_integrate_message(message, &json!({"id": "b", "text": "did it"}));
    assert_eq!(rendered.unwrap(), "b: did it");
    // The bare form still reads, and the plan shows it as before.
    let plan = planned("version: 1\nagents:\n  a: { prompt: x }\nintegrate: merge\n", &[]);
    assert_eq!(plan.integrate.mode, orch_workflows::IntegrateMode::Merge);
    assert_eq!(serde_json::to_value(&plan.integrate).unwrap(), json!("merge"));

    let errors = |text: &str| render_diagnostics(&load_str(text, "wf.yaml").unwrap_err());
    let shown = errors("version: 1\nagents:\n  a: { prompt: x, base: needs }\n");
    assert!(shown.contains("`a` has `base: needs` but needs no agent") && shown.contains("wf.yaml:3:"), "{shown}");
    let shown =
        errors("version: 1\nagents:\n  a: { prompt: x }\nintegrate: { mode: squash, message: \"{{ inputs.x }}\" }\n");
    assert!(shown.contains("`integrate.message` reads `inputs.x`"), "{shown}");
    let shown = errors("version: 1\nagents:\n  a: { prompt: x }\nintegrate: rebase\n");
    assert!(shown.contains("rebase") && shown.contains("squash"), "{shown}");
    let shown = errors("version: 1\nagents:\n  a: { prompt: x, expect: { files: 1 } }\n");
    assert!(shown.contains("files"), "{shown}");
}
