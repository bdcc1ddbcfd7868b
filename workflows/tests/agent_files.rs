//! Claude Code parity for the files of a `.claude/` folder, on real public files
//! (tests/fixtures, licences in their READMEs): agent definitions (the accepted set must
//! be Claude Code's, per `agent-files/verdicts.tsv`), name clashes and what `orch plan`
//! shows for `uses:`, skills, and slash commands.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use orch_workflows::commands::{Commands, expand};
use orch_workflows::skills::Skills;
use orch_workflows::subagents::{AgentFiles, Origin, parse_agent_file};
use orch_workflows::{Inputs, load_str, plan, render_diagnostics, render_text};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every `*.md` under `dir` (but READMEs), as (path relative to `dir`, contents).
fn markdown_under(dir: &Path) -> Vec<(String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.extension().is_some_and(|e| e == "md") && !path.ends_with("README.md") {
                let rel = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn the_accepted_agent_files_are_claude_codes() {
    let dir = fixtures().join("agent-files");
    let verdicts = std::fs::read_to_string(dir.join("verdicts.tsv")).unwrap();
    let mut mismatches = Vec::new();
    let (mut accepted, mut rejected) = (0, 0);
    for line in verdicts.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let mut cols = line.split('\t');
        let (file, verdict, reason) = (cols.next().unwrap(), cols.next().unwrap(), cols.next().unwrap_or(""));
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        // Parsed as a project agent, where Claude Code refuses what it cannot read.
        let got = parse_agent_file(&text, &format!(".claude/agents/{file}"));
        match (verdict, &got) {
            ("accept", Ok(_)) => accepted += 1,
            ("reject", Err(_)) => rejected += 1,
            _ => mismatches.push(format!("{file}: Claude Code: {verdict} ({reason}); orch: {got:?}")),
        }
    }
    assert!(mismatches.is_empty(), "{} mismatches:\n{}", mismatches.len(), mismatches.join("\n"));
    // The whole corpus was read: 158 VoltAgent, 202 wshobson, and the hand-made shapes.
    assert!(accepted >= 360 + 8, "{accepted} accepted");
    assert!(rejected >= 8, "{rejected} rejected");
    let listed = verdicts.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(listed, markdown_under(&dir).len(), "every fixture file has a verdict");
}

#[test]
fn lenient_fields_come_out_right() {
    let dir = fixtures().join("agent-files/synthetic");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    let (lf, _) = parse_agent_file(&read("lf-colon.md"), ".claude/agents/lf-colon.md").unwrap();
    // The `\n` escapes of a one-line description become line breaks, as in Claude Code.
    assert_eq!(
        lf.description,
        "Reads logs. Use it when: a test fails in CI\n<example>user: \"why did it fail\"</example>"
    );
    assert_eq!(lf.tools, Some(vec!["Read".to_string(), "Grep".into(), "Glob".into()]));
    let (star, _) = parse_agent_file(&read("tools-star.md"), ".claude/agents/tools-star.md").unwrap();
    assert_eq!(star.tools, None, "`tools: *` is every tool");
    let (patterns, warnings) = parse_agent_file(&read("tools-patterns.md"), ".claude/agents/p.md").unwrap();
    // A restricted `Bash(...)` is left out rather than widened to all of Bash.
    assert_eq!(patterns.tools, Some(vec!["Read".to_string(), "Agent".into()]));
    assert_eq!(patterns.max_turns, None);
    assert!(warnings.iter().any(|w| w.contains("Bash(git add:*, git commit:*)")), "{warnings:?}");
    assert!(warnings.iter().any(|w| w.contains("maxTurns")), "{warnings:?}");
    let (block, _) = parse_agent_file(&read("block-scalar.md"), ".claude/agents/b.md").unwrap();
    assert!(block.description.contains("<example>\nuser: \"Add a flag\""), "{}", block.description);

    // A real VoltAgent file with an unquoted colon-space in its description.
    let volt = markdown_under(&fixtures().join("agent-files/voltagent"));
    let (_, text) = volt
        .iter()
        .find(|(_, t)| {
            t.lines()
                .nth(2)
                .is_some_and(|l| l.contains(": ") && l.starts_with("description: ") && !l.contains("description: \""))
        })
        .expect("a file with an unquoted colon");
    parse_agent_file(text, ".claude/agents/x.md").unwrap();
}

#[test]
fn plugin_agents_load_as_claude_code_loads_them() {
    let text =
        std::fs::read_to_string(fixtures().join("agent-files/synthetic/multiline-examples-unindented.md")).unwrap();
    assert!(parse_agent_file(&text, ".claude/agents/change-planner.md").is_err());
    // From a plugin, Claude Code keeps the agent under its file name with a placeholder.
    let (file, warnings) = parse_agent_file(&text, "plugins/planning/agents/change-planner.md").unwrap();
    assert_eq!((file.name.as_str(), file.origin), ("change-planner", Origin::Plugin));
    assert!(file.description.contains("plugin"), "{}", file.description);
    assert_eq!(file.tools, None);
    assert!(!warnings.is_empty());
    let escalating = "---\nname: p\ndescription: d\npermissionMode: bypassPermissions\n---\nbody";
    let (file, _) = parse_agent_file(escalating, "plugins/x/agents/p.md").unwrap();
    assert_eq!(file.permission_mode, None, "a plugin's agent cannot raise its own permissions");
}

fn agent(name: &str, description: &str, tools: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\ntools: {tools}\nmodel: haiku\n---\nYou are {name}.\n")
}

#[test]
fn name_clashes_follow_a_defined_precedence() {
    let files = vec![
        ("plugins/kit/agents/reviewer.md".to_string(), agent("reviewer", "plugin", "Read")),
        (".claude/agents/reviewer.md".to_string(), agent("reviewer", "claude", "Read, Grep")),
        (".orch/agents/reviewer.md".to_string(), agent("reviewer", "orch", "Read, Grep, Glob")),
        (".claude/agents/a-helper.md".to_string(), agent("helper", "first", "Read")),
        (".claude/agents/b-helper.md".to_string(), agent("helper", "second", "Read")),
        ("plugins/kit/agents/only.md".to_string(), agent("only-plugin", "plugin", "Read")),
        (".claude/agents/only.md".to_string(), agent("only-plugin", "project", "Read")),
    ];
    let found = AgentFiles::from_files(&files);
    assert_eq!(found.get("reviewer").unwrap().source, ".orch/agents/reviewer.md");
    assert_eq!(found.get("helper").unwrap().source, ".claude/agents/a-helper.md");
    assert_eq!(found.get("only-plugin").unwrap().description, "project");
    assert_eq!(found.agents.len(), 3);
    assert_eq!(found.clashes.len(), 4, "{:?}", found.clashes);
    let ignored: Vec<&str> = found.clashes.iter().map(|c| c.ignored.as_str()).collect();
    assert!(ignored.contains(&"plugins/kit/agents/reviewer.md") && ignored.contains(&".claude/agents/reviewer.md"));
    assert!(found.warnings.iter().any(|w| w.contains(".orch/agents wins over .claude/agents")), "{:?}", found.warnings);
    // The order the files come in does not change the winner.
    let mut reversed = files.clone();
    reversed.reverse();
    let again = AgentFiles::from_files(&reversed);
    assert_eq!(again.get("reviewer").unwrap().source, ".orch/agents/reviewer.md");
}

#[test]
fn orch_plan_shows_the_definitions_tools_model_and_source() {
    let workflow = load_str(
        "version: 1\ndefaults:\n  tools: [Read]\n  skills: [lint]\nagents:\n  review:\n    uses: reviewer\n  own:\n    uses: reviewer\n    tools: [Grep]\n    skills: []\n",
        "wf.yaml",
    )
    .unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)));
    assert_eq!(workflow.defaults.skills, Some(vec!["lint".to_string()]));
    assert_eq!(workflow.agents[1].skills, Some(vec![]));
    let files = vec![(
        ".claude/agents/reviewer.md".to_string(),
        "---\nname: reviewer\ndescription: Reviews: diffs\ntools: Read, Grep, Glob, Bash\ndisallowedTools: Bash\nmodel: sonnet\n---\nReview.\n".to_string(),
    )];
    let found = AgentFiles::from_files(&files);
    let mut planned = plan(&workflow, &Inputs::default()).unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)));
    assert!(found.apply_to_plan(&workflow, &mut planned).is_empty());
    let text = render_text(&planned).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(text.contains("agent review uses: reviewer (from .claude/agents/reviewer.md) model: claude-sonnet-4-5 tools: Read, Grep, Glob skills: lint sandbox:"), "{text}");
    // The agent's own tools win over the definition's.
    assert!(
        text.contains(
            "agent own uses: reviewer (from .claude/agents/reviewer.md) model: claude-sonnet-4-5 tools: Grep skills: (none) sandbox:"
        ),
        "{text}"
    );
}

#[test]
fn real_skills_parse() {
    let dir = fixtures().join("skills/anthropics");
    let files: Vec<(String, String)> =
        markdown_under(&dir).into_iter().map(|(path, text)| (format!(".claude/skills/{path}"), text)).collect();
    assert_eq!(files.len(), 12);
    let skills = Skills::from_files(&files);
    assert_eq!(skills.skills.len(), 12, "{:?}", skills.warnings);
    for skill in &skills.skills {
        let given = files.iter().find(|(p, _)| *p == skill.source).unwrap();
        assert!(given.1.contains(&format!("name: {}", skill.name)), "{}", skill.source);
        assert!(skill.description.len() > 20, "{}: {}", skill.name, skill.description);
        assert!(!skill.body.starts_with("---") && !skill.body.is_empty(), "{}", skill.name);
        assert_eq!(skill.directory, format!(".claude/skills/{}", skill.name));
    }
    let api = skills.get("claude-api").unwrap();
    assert!(api.description.starts_with("Reference for the Claude API"), "{}", api.description);
    let limited = vec!["mcp-builder".to_string(), "webapp-testing".to_string()];
    let names: Vec<&str> = skills.visible(Some(&limited)).map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["mcp-builder", "webapp-testing"]);
}

#[test]
fn real_commands_expand() {
    let dir = fixtures().join("commands/wshobson");
    let files: Vec<(String, String)> =
        markdown_under(&dir).into_iter().map(|(path, text)| (format!(".claude/commands/{path}"), text)).collect();
    let commands = Commands::from_files(&files);
    assert_eq!(commands.commands.len(), files.len(), "{:?}", commands.warnings);
    let mut expanded = 0;
    for command in &commands.commands {
        assert!(!command.body.starts_with("---"), "{}", command.source);
        let out = expand(&format!("/{} src/lib.rs --strict", command.name), &commands).unwrap().unwrap();
        let positional = command.body.as_bytes().windows(2).any(|w| w[0] == b'$' && (b'1'..=b'9').contains(&w[1]));
        if command.body.contains("$ARGUMENTS") {
            assert!(!out.prompt.contains("$ARGUMENTS"), "{}", command.name);
            assert!(out.prompt.contains("src/lib.rs --strict"), "{}: {}", command.name, out.prompt);
            expanded += 1;
        } else if !positional {
            assert!(out.prompt.ends_with("\n\nARGUMENTS: src/lib.rs --strict"), "{}", command.name);
        }
    }
    assert!(expanded >= 10, "{expanded} commands use $ARGUMENTS");
    assert!(
        commands.commands.iter().any(|c| c.allowed_tools.is_some() || c.model.is_some() || c.argument_hint.is_some())
    );
}

#[test]
fn skills_lists_are_checked() {
    let errors = load_str(
        "version: 1\ndefaults:\n  skills: [lint, lint]\nagents:\n  a:\n    prompt: p\n    skills: [\"../x\", \"\"]\n",
        "wf.yaml",
    )
    .unwrap_err();
    let text = render_diagnostics(&errors);
    assert_eq!(errors.len(), 3, "{text}");
    assert!(text.contains("`lint` in `skills` is listed twice"), "{text}");
    assert!(text.contains("`../x` in `skills` is not a skill name"), "{text}");
    assert!(text.contains("wf.yaml:7:"), "{text}");
}

#[test]
fn skills_and_commands_a_workflow_names_must_exist() {
    let skills = Skills::from_files(&[
        (".claude/skills/lint/SKILL.md".to_string(), "---\ndescription: Lints.\n---\nL".to_string()),
        (".orch/skills/notes/SKILL.md".to_string(), "---\ndescription: Notes.\n---\nN".to_string()),
    ]);
    let commands = Commands::from_files(&[(".claude/commands/review.md".to_string(), "Review $ARGUMENTS".to_string())]);
    let text = "version: 1\ndefaults:\n  skills: [lint, lnt]\nagents:\n  a:\n    prompt: /reveiw x\n    skills: [notes, nope]\n  b:\n    prompt: /review y\n  c:\n    prompt: /usr/bin/env is odd\n";
    let workflow = load_str(text, "wf.yaml").unwrap();
    let mut found = skills.check_workflow(&workflow);
    found.extend(orch_workflows::commands::check_workflow(&workflow, &commands));
    let rendered = render_diagnostics(&found);
    assert_eq!(found.len(), 3, "{rendered}");
    assert!(rendered.contains("wf.yaml:3:") && rendered.contains("unknown skill `lnt`"), "{rendered}");
    assert!(rendered.contains("did you mean `lint`?"), "{rendered}");
    assert!(rendered.contains("wf.yaml:7:") && rendered.contains("unknown skill `nope`"), "{rendered}");
    assert!(rendered.contains("wf.yaml:6:") && rendered.contains("`/reveiw`"), "{rendered}");
}

#[test]
fn the_plan_shows_expanded_commands_and_offered_skills() {
    let skills = Skills::from_files(&[
        (".claude/skills/lint/SKILL.md".to_string(), "---\ndescription: Lints.\n---\nL".to_string()),
        (".claude/skills/notes/SKILL.md".to_string(), "---\ndescription: Notes.\n---\nN".to_string()),
    ]);
    let commands = Commands::from_files(&[(
        ".claude/commands/review.md".to_string(),
        "---\nallowed-tools: Read, Bash(git diff:*)\nmodel: haiku\n---\nReview $1 for $2.".to_string(),
    )]);
    let text = "version: 1\ndefaults:\n  tools: [Grep, Skill]\nagents:\n  a:\n    prompt: /review src/lib.rs bugs\n    skills: [notes]\n  b:\n    prompt: plain\n    tools: [Read]\n";
    let workflow = load_str(text, "wf.yaml").unwrap();
    let mut planned = plan(&workflow, &Inputs::new()).unwrap();
    assert!(orch_workflows::commands::apply_to_plan(&commands, &mut planned).is_empty());
    skills.apply_to_plan(&mut planned);
    let text = render_text(&planned);
    assert!(text.contains("Review src/lib.rs for bugs."), "{text}");
    assert!(text.contains("command:     .claude/commands/review.md"), "{text}");
    assert!(text.contains("model:       claude-haiku-4-5"), "{text}");
    assert!(text.contains("tools:       Grep, Skill, Read, Bash"), "{text}");
    assert!(text.contains("skills:      notes"), "{text}");
    // `b` has no Skill tool: it is offered none.
    assert!(text.contains("skills:      (none)"), "{text}");
}
