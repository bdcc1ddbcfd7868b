//! Unit tests of the decision order; the table in `agents/tests/permissions/` covers
//! the rule grammar case by case.

use super::*;
use crate::tools::core_tools;
use serde_json::json;

fn tool(name: &str) -> std::sync::Arc<dyn DynTool> {
    core_tools().into_iter().find(|t| t.name() == name).unwrap()
}

fn perms(rules: RuleSet) -> Permissions {
    Permissions::new(&rules, Path::new("/w/tree"), Some(Path::new("/home/u")), vec!["/w/tree".into(), "/w/tmp".into()])
        .unwrap()
}

fn rules(allow: &[&str], deny: &[&str], ask: &[&str]) -> RuleSet {
    let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    RuleSet { allow: v(allow), deny: v(deny), ask: v(ask), ..Default::default() }
}

fn bash(p: &Permissions, command: &str) -> Decision {
    p.decide(tool("Bash").as_ref(), &json!({ "command": command }), false)
}

#[test]
fn deny_beats_ask_beats_allow() {
    let p = perms(rules(&["Bash(git:*)"], &["Bash(git push:*)"], &["Bash(git commit:*)"]));
    assert_eq!(bash(&p, "git status"), Decision::Allow);
    assert!(matches!(bash(&p, "git push origin"), Decision::Deny(r) if r.contains("git push")));
    assert!(matches!(bash(&p, "git commit -m x"), Decision::Deny(r) if r.contains("asks for approval")));
}

#[test]
fn allow_lists_hold_and_a_bare_ask_yields_to_a_specific_allow() {
    let mut p = perms(rules(&["Bash(git diff:*)"], &[], &[]));
    for mode in [None, Some(Mode::Default), Some(Mode::DontAsk), Some(Mode::AcceptEdits), Some(Mode::Plan)] {
        p.mode = mode;
        assert!(matches!(bash(&p, "make x"), Decision::Deny(_)), "{mode:?}");
    }
    p.mode = None;
    assert_eq!(bash(&p, "git diff HEAD"), Decision::Allow);
    let p = perms(rules(&["Bash(git diff:*)"], &[], &["Bash"]));
    assert_eq!(bash(&p, "git diff"), Decision::Allow);
    assert!(matches!(bash(&p, "touch x"), Decision::Deny(r) if r.contains("`Bash`")));
}

#[test]
fn every_part_of_a_command_must_be_allowed() {
    let p = perms(rules(&["Bash(git diff:*)", "Bash(wc:*)"], &["Bash(rm:*)"], &[]));
    assert_eq!(bash(&p, "git diff | wc -l"), Decision::Allow);
    assert!(matches!(bash(&p, "git diff && curl x"), Decision::Deny(_)));
    assert!(matches!(bash(&p, "ls; rm -rf x"), Decision::Deny(r) if r.contains("rm:*")));
}

#[test]
fn read_rules_cover_every_tool_that_touches_the_path() {
    let p = perms(rules(&[], &["Read(~/.ssh/**)", "Read(./secrets/**)", "Edit(/src/gen/**)"], &[]));
    let denied = |name: &str, input: Value| matches!(p.decide(tool(name).as_ref(), &input, false), Decision::Deny(_));
    assert!(denied("Read", json!({"file_path": "/home/u/.ssh/id_rsa"})));
    assert!(denied("Grep", json!({"pattern": "x", "path": "/home/u/.ssh"})));
    assert!(!denied("Grep", json!({"pattern": "x", "path": "/home/u/src"})));
    assert!(denied("Glob", json!({"pattern": "*", "path": "secrets"})));
    assert!(denied("LS", json!({"path": "/w/tree/secrets"})));
    assert!(denied("Write", json!({"file_path": "secrets/new", "content": ""})));
    assert!(denied("Edit", json!({"file_path": "secrets/a", "old_string": "a", "new_string": "b"})));
    assert!(denied("Write", json!({"file_path": "src/gen/x.rs", "content": ""})));
    assert!(!denied("Read", json!({"file_path": "src/gen/x.rs"})));
    assert!(denied("Bash", json!({"command": "cat secrets/key.txt"})));
    assert!(denied("Bash", json!({"command": "wc -l < ./secrets/key.txt"})));
    assert!(!denied("Bash", json!({"command": "cat README.md"})));
}

#[test]
fn hidden_paths_follow_read_denies() {
    let p = perms(rules(&[], &["Read(.env*)", "Grep(logs/**)", "Edit(src/**)"], &["Read(private/**)"]));
    let hidden = |t: &str| p.hidden_paths(t).into_iter().map(|h| h.pattern).collect::<Vec<_>>();
    assert_eq!(hidden("Grep"), [".env*", "logs/**", "private/**"]);
    assert_eq!(hidden("Glob"), [".env*", "private/**"]);
    // No mode lifts an ask, so bypass hides the same; only an approving fallback shows them.
    let mut bypass = p.clone();
    bypass.mode = Some(Mode::BypassPermissions);
    assert_eq!(bypass.hidden_paths("LS").len(), 2);
    bypass.ask_fallback = AskFallback::Allow;
    assert_eq!(bypass.hidden_paths("LS").len(), 1);
}

#[test]
fn modes() {
    let edit = tool("Edit");
    let read = tool("Read");
    let mut p = perms(rules(&[], &[], &[]));
    let e = json!({"file_path": "a.rs", "old_string": "a", "new_string": "b"});
    p.mode = Some(Mode::Default);
    assert!(matches!(p.decide(edit.as_ref(), &e, false), Decision::Deny(_)));
    assert_eq!(p.decide(read.as_ref(), &json!({"file_path": "a.rs"}), false), Decision::Allow);
    assert!(matches!(bash(&p, "make"), Decision::Deny(_)));
    assert_eq!(bash(&p, "git status"), Decision::Allow);
    p.mode = Some(Mode::AcceptEdits);
    assert_eq!(p.decide(edit.as_ref(), &e, false), Decision::Allow);
    assert!(matches!(bash(&p, "make"), Decision::Deny(_)));
    p.mode = Some(Mode::BypassPermissions);
    assert_eq!(bash(&p, "make"), Decision::Allow);
    p.mode = Some(Mode::Plan);
    assert!(matches!(p.decide(edit.as_ref(), &e, false), Decision::Deny(r) if r.contains("plan mode")));
    p.mode = None;
    assert_eq!(bash(&p, "make"), Decision::Allow);
    p.mode = Some(Mode::Default);
    p.ask_fallback = AskFallback::Allow;
    assert_eq!(bash(&p, "make"), Decision::Allow);
}

#[test]
fn accept_edits_approves_file_commands_inside_the_writable_roots_only() {
    let mut p = perms(rules(&[], &[], &[]));
    p.mode = Some(Mode::AcceptEdits);
    for command in ["touch made.txt", "mkdir -p a/b && touch a/b/c", "mv a b", "cp -r src /w/tmp/copy", "rm -f x"] {
        assert_eq!(bash(&p, command), Decision::Allow, "{command}");
    }
    for command in
        ["touch /etc/x", "mkdir a && curl x", "cp a ../outside", "touch $HOME/x", "sed -i s/a/b/ f", "rm x; make"]
    {
        assert!(matches!(bash(&p, command), Decision::Deny(_)), "{command}");
    }
    p.mode = Some(Mode::Default);
    assert!(matches!(bash(&p, "touch made.txt"), Decision::Deny(_)));
}

#[test]
fn no_mode_lifts_an_ask_rule_not_even_bypass() {
    let mut p = perms(rules(&[], &[], &["Bash(touch:*)"]));
    p.mode = Some(Mode::BypassPermissions);
    assert!(matches!(bash(&p, "touch made.txt"), Decision::Deny(r) if r.contains("asks for approval")));
    assert_eq!(bash(&p, "make"), Decision::Allow);
    p.ask_fallback = AskFallback::Allow;
    assert_eq!(bash(&p, "touch made.txt"), Decision::Allow);
}

#[test]
fn a_hook_allow_skips_ask_but_never_a_deny() {
    let p = perms(rules(&[], &["Bash(rm:*)"], &["Bash"]));
    assert_eq!(p.decide(tool("Bash").as_ref(), &json!({"command": "make"}), true), Decision::Allow);
    assert!(matches!(p.decide(tool("Bash").as_ref(), &json!({"command": "rm -rf x"}), true), Decision::Deny(_)));
}

#[test]
fn hard_denials() {
    let write = tool("Write");
    let edit = tool("Edit");
    let p = perms(RuleSet { mode: Some(Mode::BypassPermissions), ..Default::default() });
    let w = |path: &str| json!({"file_path": path, "content": "x"});
    assert!(p.hard_denial(write.as_ref(), &w("src/a.rs")).is_none());
    assert!(p.hard_denial(write.as_ref(), &w("/w/tmp/scratch")).is_none());
    assert!(p.hard_denial(write.as_ref(), &w("/etc/passwd")).unwrap().contains("outside"));
    assert!(p.hard_denial(write.as_ref(), &w("../other/x")).unwrap().contains("outside"));
    assert!(p.hard_denial(write.as_ref(), &w("/w/tree-evil/x")).unwrap().contains("outside"));
    assert!(p.hard_denial(write.as_ref(), &w(".git/config")).unwrap().contains("git internals"));
    assert!(p.hard_denial(write.as_ref(), &w("sub/.git/hooks/pre-commit")).unwrap().contains("git internals"));
    let e = json!({"file_path": ".git/HEAD", "old_string": "a", "new_string": "b"});
    assert!(p.hard_denial(edit.as_ref(), &e).unwrap().contains("git internals"));
}

#[test]
fn bad_rules_are_errors_with_their_source() {
    let cwd = Path::new("/w");
    assert!(Rule::parse("Bash(git *", cwd, None).unwrap_err().reason.contains("end with `)`"));
    assert!(Rule::parse("(x)", cwd, None).is_err());
    assert!(Rule::parse("Read(~/.ssh/**)", cwd, None).unwrap_err().reason.contains("home"));
    assert!(Rule::parse("Raed(x)", cwd, None).unwrap_err().reason.contains("no tool named `Raed`"));
    assert!(Rule::parse("TodoWrite(x)", cwd, None).unwrap_err().reason.contains("specifier"));
    let source = RuleSource { file: ".claude/settings.json".into(), line: Some(7), settings_dir: None };
    let bad = [SourcedRule { verdict: Verdict::Deny, rule: "Reed(.env)".into(), source }];
    let err = Permissions::from_rules(None, &bad, cwd, None, vec![]).unwrap_err();
    assert!(err.to_string().contains(".claude/settings.json:7"), "{err}");
}

#[test]
fn the_listing_names_each_rule_and_its_source() {
    let source = RuleSource { file: "/r/.claude/settings.json".into(), line: Some(4), settings_dir: Some("/r".into()) };
    let rules = [
        SourcedRule { verdict: Verdict::Allow, rule: "Bash(npm test)".into(), source: source.clone() },
        SourcedRule { verdict: Verdict::Deny, rule: "Read(/.env)".into(), source },
    ];
    let p = Permissions::from_rules(Some(Mode::DontAsk), &rules, Path::new("/r/sub"), None, vec![]).unwrap();
    let listing = p.effective_rules();
    assert_eq!(listing[0].rule, "Read(/.env)");
    assert_eq!(listing[0].verdict, Verdict::Deny);
    assert_eq!(listing[0].source, "/r/.claude/settings.json:4");
    assert_eq!(listing[1].verdict, Verdict::Allow);
    // `/` is the settings file's directory, not the working directory.
    let read = tool("Read");
    assert!(matches!(p.decide(read.as_ref(), &json!({"file_path": "/r/.env"}), false), Decision::Deny(_)));
    assert_eq!(p.decide(read.as_ref(), &json!({"file_path": "/r/sub/.env"}), false), Decision::Allow);
}
