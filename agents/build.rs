//! Generates the declarations of the tool modules and the list of core tools, so that a
//! new tool is its module under `src/tools/` plus its entry in orch-types' catalog.
//!
//! Every `src/tools/*.rs` file but `mod.rs` becomes a public module of `tools`. A type
//! named by an `impl Tool for Name` line whose name is, ignoring case, the name of a
//! catalog entry that runs in the tool host is a core tool. The tidy test in
//! `src/tidy.rs` checks the result against the catalog.

// A build script fails the build by panicking, with the message cargo shows.
#![allow(clippy::expect_used, clippy::panic, reason = "a build script reports failure by panicking")]

use std::fmt::Write as _;
use std::path::Path;

use orch_types::tools::{CATALOG, Runs};

fn main() {
    let dir = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("src/tools");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs") && p.file_name().is_some_and(|n| n != "mod.rs"))
        .collect();
    files.sort();
    let host: Vec<&str> = CATALOG.iter().filter(|t| t.runs == Runs::Host).map(|t| t.name).collect();
    let mut modules = String::new();
    let mut tools = Vec::new();
    for file in &files {
        let module = file.file_stem().and_then(|s| s.to_str()).expect("tool module names are UTF-8");
        let _ = writeln!(modules, "#[path = {:?}]\npub mod {module};", file.display().to_string());
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("impl Tool for ") else { continue };
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if host.iter().any(|h| h.eq_ignore_ascii_case(&name)) {
                tools.push(format!("{module}::{name}"));
            }
        }
    }
    let list: String = tools.iter().map(|t| format!("        Arc::new({t}),\n")).collect();
    let registry = format!("vec![\n{list}    ]\n");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    write_if_changed(&out.join("tool_modules.rs"), &modules);
    write_if_changed(&out.join("core_tools.rs"), &registry);
}

fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
}
