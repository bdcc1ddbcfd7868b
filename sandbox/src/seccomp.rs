//! The seccomp filters of the landlock backend, built with seccompiler for the running
//! architecture and installed after Landlock (which set no_new_privs).
//!
//! Default allow; these fail with EPERM:
//! - `ptrace`, `process_vm_readv`, `process_vm_writev`, `pidfd_getfd`;
//! - mount and namespace calls: `mount`, `umount2`, `pivot_root`, `chroot`,
//!   `move_mount`, `open_tree`, `fsopen`, `fsconfig`, `fsmount`, `fspick`,
//!   `mount_setattr`, `unshare`, `setns`, and `clone` with any `CLONE_NEW*` flag;
//! - keyrings (`keyctl`, `add_key`, `request_key`), `bpf`, `perf_event_open`,
//!   `io_uring_setup`, `io_uring_enter`, `io_uring_register`, `open_by_handle_at`,
//!   kernel modules and `kexec`, `swapon`/`swapoff`, `reboot`, `acct`, `quotactl`;
//! - `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)`, which would push keystrokes into a
//!   terminal the sandbox inherited;
//! - `socket`: under `Network::None` entirely (any family), under `Network::Full` Unix
//!   sockets (`AF_UNIX`), packet sockets (`AF_PACKET`) and raw sockets (`SOCK_RAW`).
//!   Under `Network::Proxy`, as under `Full`, plus UDP sockets (`SOCK_DGRAM` in
//!   `AF_INET` and `AF_INET6`): only TCP, and only to the egress proxy.
//!   Either way no sandboxed process can `connect` to a path-based Unix socket outside
//!   the sandbox (the Docker daemon's `/var/run/docker.sock`, the user's ssh-agent or
//!   D-Bus), which Landlock does not check on connect; `socketpair` stays allowed.
//!   What this breaks inside the sandbox: anything that opens a Unix socket by path or
//!   in the abstract namespace, such as the `docker` CLI, `ssh-agent`/`gpg-agent`,
//!   syslog, `nscd`, systemd's NSS modules (they fall back to files and DNS), Python's
//!   `multiprocessing` managers and its `forkserver` start method (Python 3.14's
//!   default on Linux: use `spawn` or `fork`), and git's fsmonitor daemon and
//!   credential cache. Pipes, `socketpair` and TCP (under `Network::Full`) still work.
//!
//! `clone3` fails with ENOSYS, so libc and language runtimes fall back to `clone`, whose
//! flags a classic BPF filter can see. Other architectures' calls (i386 through
//! `int 0x80`) kill the process (seccompiler's architecture check), and on x86_64 the
//! x32 calls (number bit 30 set) fail with ENOSYS, so neither is a way around the rules.
//!
//! All of this is one BPF program, installed with one `seccomp` call: a short prefix for
//! the ENOSYS answers (x32, `clone3`) in front of seccompiler's program for the EPERM
//! rules. Each installed program costs the kernel a conversion and a JIT compilation
//! (about 60 µs on the 2-core VM of BENCHMARKS.md, whatever its size), which
//! `orch sandbox run` pays on every command.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch, sock_filter,
};

use crate::error::SandboxError;
use crate::policy::Network;

/// Syscalls denied with EPERM whatever their arguments.
const DENIED: &[(&str, libc::c_long)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
];

/// The `CLONE_NEW*` flags `clone` may not carry. (`CLONE_NEWTIME` shares its bit with
/// the exit signal in `clone`'s flags; `unshare` and `clone3`, the only ways to use it,
/// are denied.)
const CLONE_NAMESPACES: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
];

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The architecture orch was built for, as seccompiler names it.
pub fn target_arch() -> Result<TargetArch, SandboxError> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| SandboxError::Seccomp { action: "built for this architecture", message: e.to_string() })
}

/// The filters for `network`, in the order they are installed.
pub fn programs(network: Network, arch: TargetArch) -> Result<Vec<BpfProgram>, SandboxError> {
    let build_err = |e: seccompiler::BackendError| SandboxError::Seccomp { action: "built", message: e.to_string() };
    let masked = |arg: u8, mask: u64, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(mask), value)
            .and_then(|c| SeccompRule::new(vec![c]))
    };
    let equal = |arg: u8, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
            .and_then(|c| SeccompRule::new(vec![c]))
    };

    let mut denied: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|(_, nr)| (*nr, vec![])).collect();
    let clone_rules = CLONE_NAMESPACES.iter().map(|flag| masked(0, *flag, *flag)).collect::<Result<_, _>>();
    denied.insert(libc::SYS_clone, clone_rules.map_err(build_err)?);
    let tty_rules = [libc::TIOCSTI, libc::TIOCLINUX].iter().map(|req| equal(1, *req)).collect::<Result<_, _>>();
    denied.insert(libc::SYS_ioctl, tty_rules.map_err(build_err)?);
    match network {
        Network::None => {
            denied.insert(libc::SYS_socket, vec![]);
        }
        Network::Full | Network::Proxy => {
            let mut rules = vec![
                // No Unix socket of any kind: a path-based one outside the roots (the
                // Docker daemon's) is out of Landlock's reach on connect.
                equal(0, libc::AF_UNIX as u64).map_err(build_err)?,
                equal(0, libc::AF_PACKET as u64).map_err(build_err)?,
                // The type may carry SOCK_NONBLOCK and SOCK_CLOEXEC; the kind is the low bits.
                masked(1, 0xf, libc::SOCK_RAW as u64).map_err(build_err)?,
            ];
            if network == Network::Proxy {
                // Only TCP to the proxy: no UDP (DNS included) in any address family.
                for family in [libc::AF_INET, libc::AF_INET6] {
                    let rule = SeccompRule::new(vec![
                        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, family as u64)
                            .map_err(build_err)?,
                        SeccompCondition::new(
                            1,
                            SeccompCmpArgLen::Dword,
                            SeccompCmpOp::MaskedEq(0xf),
                            libc::SOCK_DGRAM as u64,
                        )
                        .map_err(build_err)?,
                    ])
                    .map_err(build_err)?;
                    rules.push(rule);
                }
            }
            denied.insert(libc::SYS_socket, rules);
        }
    }
    let eperm = SeccompFilter::new(denied, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
        .map_err(build_err)?;
    let eperm = BpfProgram::try_from(eperm)
        .map_err(|e| SandboxError::Seccomp { action: "compiled", message: e.to_string() })?;
    let mut program = enosys_prefix(arch);
    program.extend(eperm);
    Ok(vec![program])
}

/// The instructions in front of seccompiler's program: for the native architecture,
/// `clone3` and (x86_64) x32 calls, the same numbers with bit 30 set, return ENOSYS;
/// everything else, other architectures included, falls through to seccompiler's
/// program, which starts over with its own architecture check. Classic BPF jumps are
/// relative, so prepending leaves seccompiler's program intact.
fn enosys_prefix(arch: TargetArch) -> BpfProgram {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    const ENOSYS: u32 = 0x0005_0000 | libc::ENOSYS as u32; // SECCOMP_RET_ERRNO | ENOSYS
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let mut calls = vec![
        op(LD_W_ABS, 0, 0, 0),                    // A = nr
        op(JEQ_K, 0, 1, libc::SYS_clone3 as u32), // clone3:
        op(RET_K, 0, 0, ENOSYS),                  //   ENOSYS
    ];
    if arch == TargetArch::x86_64 {
        calls.extend([
            op(JGE_K, 0, 1, X32_SYSCALL_BIT), // nr >= 0x40000000, x32:
            op(RET_K, 0, 0, ENOSYS),          //   ENOSYS
        ]);
    }
    let skip = u8::try_from(calls.len()).unwrap_or(u8::MAX);
    let mut prefix = vec![
        op(LD_W_ABS, 0, 0, 4),                // A = arch
        op(JEQ_K, 0, skip, audit_arch(arch)), // not the native one: on to seccompiler's program
    ];
    prefix.extend(calls);
    prefix
}

/// The `AUDIT_ARCH_*` value seccomp reports for `arch`.
fn audit_arch(arch: TargetArch) -> u32 {
    match arch {
        TargetArch::x86_64 => AUDIT_ARCH_X86_64,
        TargetArch::aarch64 => 0xC000_00B7,
        TargetArch::riscv64 => 0xC000_00F3,
    }
}

/// Installs the filters for `network` on the calling thread; threads and processes it
/// starts afterwards inherit them. Needs no_new_privs (set by Landlock before).
pub fn apply(network: Network) -> Result<(), SandboxError> {
    for program in programs(network, target_arch()?)? {
        seccompiler::apply_filter(&program)
            .map_err(|e| SandboxError::Seccomp { action: "installed", message: e.to_string() })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel would answer, after running every program (the most restrictive
    /// action wins: kill, then errno, then allow).
    #[derive(Debug, PartialEq, Eq)]
    enum Verdict {
        Allow,
        Errno(i32),
        Kill,
    }

    fn run(programs: &[BpfProgram], arch: u32, nr: i64, args: [u64; 6]) -> Verdict {
        let mut data = Vec::new();
        data.extend_from_slice(&(nr as i32).to_le_bytes());
        data.extend_from_slice(&arch.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        for a in args {
            data.extend_from_slice(&a.to_le_bytes());
        }
        let mut verdicts: Vec<u32> = programs.iter().map(|p| interpret(p, &data)).collect();
        verdicts.sort_by_key(|v| match v & 0xffff_0000 {
            0x8000_0000 | 0 => 0, // kill process / kill thread
            0x0005_0000 => 1,     // errno
            _ => 2,
        });
        match verdicts[0] {
            v if v & 0xffff_0000 == 0x7fff_0000 => Verdict::Allow,
            v if v & 0xffff_0000 == 0x0005_0000 => Verdict::Errno((v & 0xffff) as i32),
            v if v == 0x8000_0000 || v == 0 => Verdict::Kill,
            v => panic!("unexpected action {v:#x}"),
        }
    }

    /// A classic BPF interpreter for the instructions seccompiler emits.
    fn interpret(program: &[sock_filter], data: &[u8]) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        loop {
            let ins = &program[pc];
            pc += 1;
            match ins.code {
                0x20 => {
                    let k = ins.k as usize;
                    a = u32::from_le_bytes(data[k..k + 4].try_into().unwrap());
                }
                0x54 => a &= ins.k,           // ALU AND K
                0x05 => pc += ins.k as usize, // JA
                0x15 => pc += if a == ins.k { ins.jt } else { ins.jf } as usize,
                0x25 => pc += if a > ins.k { ins.jt } else { ins.jf } as usize,
                0x35 => pc += if a >= ins.k { ins.jt } else { ins.jf } as usize,
                0x45 => pc += if a & ins.k != 0 { ins.jt } else { ins.jf } as usize,
                0x06 => return ins.k,
                other => panic!("opcode {other:#x} not interpreted"),
            }
        }
    }

    fn verdict(network: Network, nr: i64, args: [u64; 6]) -> Verdict {
        let arch = target_arch().unwrap();
        run(&programs(network, arch).unwrap(), audit_arch(arch), nr, args)
    }

    const EPERM: Verdict = Verdict::Errno(libc::EPERM);

    #[test]
    fn denies_privileged_calls_and_allows_ordinary_ones() {
        for net in [Network::None, Network::Full] {
            for (name, nr) in DENIED {
                assert_eq!(verdict(net, *nr, [0; 6]), EPERM, "{name}");
            }
            for nr in [libc::SYS_read, libc::SYS_write, libc::SYS_openat, libc::SYS_execve, libc::SYS_socketpair] {
                assert_eq!(verdict(net, nr, [0; 6]), Verdict::Allow, "syscall {nr}");
            }
            assert_eq!(verdict(net, libc::SYS_clone3, [0; 6]), Verdict::Errno(libc::ENOSYS));
            // fork() and pthread_create() flags pass; any namespace flag does not.
            let thread =
                (libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_FILES | libc::CLONE_SIGHAND | libc::CLONE_THREAD) as u64;
            assert_eq!(verdict(net, libc::SYS_clone, [thread, 0, 0, 0, 0, 0]), Verdict::Allow);
            assert_eq!(verdict(net, libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]), Verdict::Allow);
            for flag in CLONE_NAMESPACES {
                let flags = flag | libc::SIGCHLD as u64;
                assert_eq!(verdict(net, libc::SYS_clone, [flags, 0, 0, 0, 0, 0]), EPERM, "clone {flag:#x}");
            }
            assert_eq!(verdict(net, libc::SYS_ioctl, [0, libc::TIOCSTI, 0, 0, 0, 0]), EPERM);
            assert_eq!(verdict(net, libc::SYS_ioctl, [0, libc::TIOCGWINSZ, 0, 0, 0, 0]), Verdict::Allow);
        }
    }

    #[test]
    fn sockets_follow_the_network_setting() {
        let inet_stream = [libc::AF_INET as u64, libc::SOCK_STREAM as u64 | libc::SOCK_CLOEXEC as u64, 0, 0, 0, 0];
        let unix = [libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
        let packet = [libc::AF_PACKET as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0];
        let raw = [libc::AF_INET as u64, libc::SOCK_RAW as u64 | libc::SOCK_NONBLOCK as u64, 1, 0, 0, 0];
        for args in [inet_stream, unix, packet, raw] {
            assert_eq!(verdict(Network::None, libc::SYS_socket, args), EPERM, "{args:?}");
        }
        assert_eq!(verdict(Network::Full, libc::SYS_socket, inet_stream), Verdict::Allow);
        assert_eq!(verdict(Network::Full, libc::SYS_socket, unix), EPERM);
        let unix_dgram = [libc::AF_UNIX as u64, libc::SOCK_DGRAM as u64 | libc::SOCK_CLOEXEC as u64, 0, 0, 0, 0];
        assert_eq!(verdict(Network::Full, libc::SYS_socket, unix_dgram), EPERM);
        assert_eq!(verdict(Network::Full, libc::SYS_socketpair, unix), Verdict::Allow);
        assert_eq!(verdict(Network::Full, libc::SYS_socket, packet), EPERM);
        assert_eq!(verdict(Network::Full, libc::SYS_socket, raw), EPERM);
        let udp6 = [libc::AF_INET6 as u64, libc::SOCK_DGRAM as u64 | libc::SOCK_CLOEXEC as u64, 0, 0, 0, 0];
        let udp4 = [libc::AF_INET as u64, libc::SOCK_DGRAM as u64, 0, 0, 0, 0];
        assert_eq!(verdict(Network::Full, libc::SYS_socket, udp4), Verdict::Allow);
        assert_eq!(verdict(Network::Proxy, libc::SYS_socket, inet_stream), Verdict::Allow);
        for args in [udp4, udp6, unix, packet, raw] {
            assert_eq!(verdict(Network::Proxy, libc::SYS_socket, args), EPERM, "{args:?}");
        }
    }

    #[test]
    fn other_abis_cannot_go_around_the_rules() {
        let arch = target_arch().unwrap();
        let programs = programs(Network::None, arch).unwrap();
        // One program: one `seccomp` call, one JIT compilation.
        assert_eq!(programs.len(), 1);
        // i386 calls on an x86_64 kernel (AUDIT_ARCH_I386) kill the process.
        assert_eq!(run(&programs, 0x4000_0003, 1, [0; 6]), Verdict::Kill);
        if arch == TargetArch::x86_64 {
            let x32 = i64::from(X32_SYSCALL_BIT);
            assert_eq!(run(&programs, AUDIT_ARCH_X86_64, x32 | libc::SYS_socket, [0; 6]), Verdict::Errno(libc::ENOSYS));
            assert_eq!(run(&programs, AUDIT_ARCH_X86_64, x32 | libc::SYS_read, [0; 6]), Verdict::Errno(libc::ENOSYS));
        }
    }
}
