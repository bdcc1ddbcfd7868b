//! What a pull request's files carry is data: a `.gitmodules` whose submodule says
//! `update = !command` (libgit2 refuses such a value, so checking the base out failed
//! for every agent) neither runs its command nor stops an agent from starting; the
//! submodule stays as it was on the agent's branch.

use crate::support::{Fixture, git};

#[test]
fn a_gitmodules_update_command_neither_runs_nor_stops_agents() {
    let fx = Fixture::new("t-gitmodules", &[("a.txt", "a\n")]);
    let lib = fx.dir.path().join("lib");
    std::fs::create_dir(&lib).unwrap();
    git(&lib, &["init", "-q", "-b", "main"]);
    std::fs::write(lib.join("l"), "l\n").unwrap();
    git(&lib, &["add", "l"]);
    git(&lib, &["commit", "-q", "-m", "lib"]);
    git(&fx.repo, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", lib.to_str().unwrap(), "lib"]);
    let marker = fx.dir.path().join("PWNED");
    let update = format!("!touch {}", marker.display());
    git(&fx.repo, &["config", "-f", ".gitmodules", "submodule.lib.update", &update]);
    git(&fx.repo, &["add", "-A"]);
    git(&fx.repo, &["commit", "-q", "-m", "a submodule that runs a command"]);
    let gitlink = git(&fx.repo, &["ls-tree", "HEAD", "lib"]);

    let workflow = r#"
version: 1
name: gitmodules
defaults:
  tools: [Bash]
  limits: { max_turns: 3, timeout: 1m }
agents:
  a: { prompt: Work. }
  b: { prompt: Work. }
integrate: branches
"#;
    let script = r#"
version: 1
agents:
  a:
    - tool_calls: [{name: Bash, input: {command: "echo a > made-a.txt"}}]
    - text: done
  b:
    - tool_calls: [{name: Bash, input: {command: "echo b > made-b.txt"}}]
    - text: done
  synthesis:
    - text: done
"#;
    let run = fx.run(workflow, script, &[]);
    run.expect_code(0);
    assert!(!marker.exists(), "the submodule's update command ran");
    for agent in ["a", "b"] {
        assert_eq!(run.agent(agent)["status"], "succeeded", "{:#}", run.agent(agent));
        let branch = fx.branch(agent);
        assert_eq!(fx.show(&branch, &format!("made-{agent}.txt")), format!("{agent}\n"));
        assert_eq!(git(&fx.repo, &["ls-tree", &branch, "lib"]), gitlink, "the submodule changed on {branch}");
        assert_eq!(fx.show(&branch, ".gitmodules"), fx.show("HEAD", ".gitmodules"));
    }
}
