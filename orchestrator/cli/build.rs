//! Link options of the orch binary that depend on the toolchain it is built with.
//!
//! On glibc targets the binary packs its relative relocations (`-z pack-relative-relocs`,
//! `DT_RELR`) when the linker and C library here support it: a position-independent
//! orch has some 60,000 of them, 1.4 MiB of `.rela.dyn` that the dynamic loader reads
//! at every start (every `orch sandbox run`, every tool host that is exec'd), against a
//! few KiB packed. An older linker, or a glibc before 2.36, keeps the plain table: the
//! probe below links a trivial program with the option and warnings made fatal (ld
//! warns, and ignores it, when the C library cannot load packed relocations).

use std::path::PathBuf;
use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=ORCH_NO_PACKED_RELOCS");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    if std::env::var_os("ORCH_NO_PACKED_RELOCS").is_some() || var("TARGET") != var("HOST") {
        return;
    }
    if links_with_packed_relocations() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the C compiler driver rustc links with (`cc`, or `$CC`) links a program with
/// packed relocations, without a warning.
fn links_with_packed_relocations() -> bool {
    let Some(out_dir) = std::env::var_os("OUT_DIR").map(PathBuf::from) else { return false };
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let source = out_dir.join("relr_probe.c");
    let program = out_dir.join("relr_probe");
    if std::fs::write(&source, "int main(void) { return 0; }\n").is_err() {
        return false;
    }
    let linked = Command::new(cc)
        .args(["-fPIE", "-pie", "-Wl,-z,pack-relative-relocs", "-Wl,--fatal-warnings", "-o"])
        .arg(&program)
        .arg(&source)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    // The program must also start: the loader here must understand what was linked.
    linked && Command::new(&program).status().is_ok_and(|s| s.success())
}
