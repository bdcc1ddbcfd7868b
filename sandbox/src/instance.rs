//! What makes a sandbox name this process's own: [`tag`], `<pid>s<start time>` of the
//! calling process (the start time in clock ticks since boot, `/proc/<pid>/stat` field
//! 22). Two live processes never share it, so cgroups and containers named with it never
//! collide between two runs, even runs with the same run id; and [`alive`] tells a
//! leftover of a dead coordinator (for recovery to remove) from a live one's.

use std::sync::OnceLock;

/// This process's tag (computed once).
pub fn tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let pid = std::process::id();
        format!("{pid}s{}", start_time(pid).unwrap_or_default())
    })
}

/// Whether the process that `tag` names still runs (the same pid, started at the same
/// time). A malformed tag counts as alive: nothing is removed on a guess.
pub fn alive(tag: &str) -> bool {
    let Some((pid, start)) = tag.split_once('s') else { return true };
    let Ok(pid) = pid.parse::<u32>() else { return true };
    start_time(pid).is_some_and(|now| now == start)
}

/// Field 22 (start time) of `/proc/<pid>/stat`, or `None` if no such process.
pub fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces.
    let after = stat.get(stat.rfind(')')? + 1..)?;
    after.split_whitespace().nth(19).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_gone_one_is_not() {
        assert!(alive(tag()), "{}", tag());
        assert!(tag().starts_with(&format!("{}s", std::process::id())));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let start = start_time(pid);
        child.wait().unwrap();
        if let Some(start) = start {
            assert!(!alive(&format!("{pid}s{start}")));
        }
        assert!(!alive(&format!("{}s0", std::process::id())), "a reused pid is another process");
        assert!(alive("garbage"));
    }
}
