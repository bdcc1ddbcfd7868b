//! [`Limits`]: the turn, token, cost and time budget of a run or of one agent, as a
//! workflow file writes it and as the agent loop enforces it, and the disk bounds of an
//! agent (`max_disk`, `max_file_size`), which the coordinator enforces.

use crate::{Duration, Size};

/// The `max_disk` of an agent when neither it nor `defaults:` sets one: 2 GiB.
pub const DEFAULT_MAX_DISK: Size = Size::from_gib(2);

/// The `max_file_size` of an agent when neither it nor `defaults:` sets one: 20 MiB.
pub const DEFAULT_MAX_FILE_SIZE: Size = Size::from_mib(20);

/// Turn, token, cost and time limits. `None` leaves a limit unset (unlimited).
///
/// A workflow gives them for the whole run (`limits:`) or per agent
/// (`defaults.limits`, `agents.<id>.limits`); the agent loop stops when one is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(deny_unknown_fields))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct Limits {
    /// Most model calls.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub max_turns: Option<u32>,
    /// Most tokens processed (input, cache reads and writes, output).
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub max_tokens: Option<u64>,
    /// Most spend, in US dollars.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub max_cost_usd: Option<f64>,
    /// Wall-clock limit.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub timeout: Option<Duration>,
    /// Commit an agent's worktree on its branch every this many turns while it runs,
    /// so a run killed outright loses at most that many turns (0: never; unset: the
    /// coordinator's default of 10). A bound on lost work rather than a stop: the loop
    /// does not enforce it, the coordinator does.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub checkpoint_every: Option<u32>,
    /// Most growth of an agent's worktree and private tmp and home, in bytes; past it
    /// the agent is stopped as `partial` (the coordinator measures it; no single file
    /// can grow past it either). Per agent only.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub max_disk: Option<Size>,
    /// Files larger than this are left out of an agent's commit and listed in the
    /// report. Per agent only.
    #[cfg_attr(feature = "serde", serde(default, skip_serializing_if = "Option::is_none"))]
    pub max_file_size: Option<Size>,
}

impl Limits {
    /// `self`, with every unset field taken from `fallback`.
    pub fn or(self, fallback: Limits) -> Limits {
        Limits {
            max_turns: self.max_turns.or(fallback.max_turns),
            max_tokens: self.max_tokens.or(fallback.max_tokens),
            max_cost_usd: self.max_cost_usd.or(fallback.max_cost_usd),
            timeout: self.timeout.or(fallback.timeout),
            checkpoint_every: self.checkpoint_every.or(fallback.checkpoint_every),
            max_disk: self.max_disk.or(fallback.max_disk),
            max_file_size: self.max_file_size.or(fallback.max_file_size),
        }
    }

    /// The three budgets a run shares out among its agents (turns, tokens, cost), with
    /// every other limit unset: what a run has left, for [`Limits::capped_by`].
    pub fn budgets(max_turns: Option<u32>, max_tokens: Option<u64>, max_cost_usd: Option<f64>) -> Limits {
        Limits { max_turns, max_tokens, max_cost_usd, ..Limits::default() }
    }

    /// `self`, with each limit lowered to `left`'s where `left` sets a lower one. Every
    /// field is named, so a new limit must say here whether what a run has left caps it
    /// (the time and disk bounds are each agent's own: a run does not share them out).
    pub fn capped_by(self, left: Limits) -> Limits {
        let Limits { max_turns, max_tokens, max_cost_usd, timeout, checkpoint_every, max_disk, max_file_size } = self;
        Limits {
            max_turns: min_opt(max_turns, left.max_turns, u32::min),
            max_tokens: min_opt(max_tokens, left.max_tokens, u64::min),
            max_cost_usd: min_opt(max_cost_usd, left.max_cost_usd, f64::min),
            timeout,
            checkpoint_every,
            max_disk,
            max_file_size,
        }
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Limits::default()
    }
}

/// The lower of two optional limits; unset is unlimited.
fn min_opt<T>(a: Option<T>, b: Option<T>, min: fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(min(a, b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn or_fills_only_the_unset_fields() {
        let own = Limits { max_turns: Some(5), ..Limits::default() };
        let fallback = Limits { max_turns: Some(50), max_cost_usd: Some(2.0), ..Limits::default() };
        let merged = own.or(fallback);
        assert_eq!(merged.max_turns, Some(5));
        assert_eq!(merged.max_cost_usd, Some(2.0));
        assert!(merged.timeout.is_none() && !merged.is_empty());
        assert!(Limits::default().is_empty());
    }

    #[test]
    fn capped_by_lowers_only_the_budgets() {
        let own = Limits {
            max_turns: Some(8),
            max_cost_usd: Some(3.0),
            timeout: Some(Duration::from_std(std::time::Duration::from_secs(60))),
            ..Limits::default()
        };
        let capped = own.capped_by(Limits::budgets(Some(5), Some(100), Some(9.0)));
        assert_eq!(capped.max_turns, Some(5));
        assert_eq!(capped.max_tokens, Some(100));
        assert_eq!(capped.max_cost_usd, Some(3.0));
        assert_eq!(capped.timeout, own.timeout);
        assert_eq!(Limits::default().capped_by(Limits::default()), Limits::default());
    }

    #[test]
    fn serde_writes_only_what_is_set_and_rejects_unknown_keys() {
        let limits: Limits = serde_json::from_str(r#"{"max_turns": 3, "timeout": "1.5h"}"#).unwrap();
        assert_eq!(limits.timeout.map(|d| d.as_std().as_secs()), Some(5400));
        assert_eq!(serde_json::to_string(&limits).unwrap(), r#"{"max_turns":3,"timeout":"1h30m"}"#);
        let disk: Limits = serde_json::from_str(r#"{"max_disk": "2048MiB", "max_file_size": 1024}"#).unwrap();
        assert_eq!(disk.max_disk, Some(DEFAULT_MAX_DISK));
        assert_eq!(disk.max_file_size.map(|s| s.bytes()), Some(1024));
        assert_eq!(serde_json::to_string(&disk).unwrap(), r#"{"max_disk":"2GiB","max_file_size":"1KiB"}"#);
        let merged = Limits::default().or(disk);
        assert_eq!(merged.max_disk, disk.max_disk);
        assert!(serde_json::from_str::<Limits>(r#"{"max_turn": 3}"#).is_err());
    }
}
