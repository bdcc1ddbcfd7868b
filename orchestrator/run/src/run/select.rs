//! Which agents a run actually runs: `--only PATTERN`, `--shard K/N`, and results taken
//! from an earlier run directory (`--from DIR` for upstream results, `--resume DIR` to
//! rerun only what did not succeed).
//!
//! - `--only` selects agents whose id or key matches a glob (`fix/*`, `survey`), plus
//!   every agent they need, so that the selection can run on its own.
//! - `--shard K/N` selects the agents whose id hashes (FNV-1a, 64 bits) to `K-1` modulo
//!   `N`. The hash depends on the id alone, so adding an agent moves no other. Agents a
//!   shard needs must come from `--from DIR` (every shard then sees the same results,
//!   and a dynamic fan-out the same items), or the run refuses to start.
//! - A prior agent that succeeded is not run again: its text and output feed templates
//!   and fan-outs as if it had just run. With `--resume` it also stays in the report.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use globset::{Glob, GlobSet, GlobSetBuilder};
use orch_workflows::{Plan, PlanNode};

use super::report::{AgentReport, AgentStatus};
use crate::exit::UsageError;

/// `K/N`, 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("`{s}` is not a shard; write K/N with 1 <= K <= N, such as 2/4");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count): (u32, u32) = (k.trim().parse().map_err(|_| bad())?, n.trim().parse().map_err(|_| bad())?);
        if count == 0 || index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The shard (1-based) an agent id belongs to among `count`.
pub fn shard_of(id: &str, count: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(count.max(1))) as u32 + 1
}

/// What to run.
#[derive(Debug, Default)]
pub struct Selection {
    only: Option<GlobSet>,
    /// Agent keys pulled in because a selected agent needs them.
    upstream: BTreeSet<String>,
    shard: Option<Shard>,
    /// Succeeded agents of an earlier run, by id.
    pub prior: HashMap<String, AgentReport>,
    /// `--resume`: prior agents stay in the new report.
    pub keep_prior: bool,
}

impl Selection {
    /// Builds the selection and checks it against `plan`.
    pub fn new(
        plan: &Plan,
        only: &[String],
        shard: Option<Shard>,
        from: Option<&Path>,
        resume: Option<&Path>,
    ) -> Result<Selection, UsageError> {
        let mut selection = Selection { shard, keep_prior: resume.is_some(), ..Selection::default() };
        if let Some(dir) = from.or(resume) {
            selection.prior = load_prior(dir)?;
        }
        if !only.is_empty() {
            let mut builder = GlobSetBuilder::new();
            for pattern in only {
                let glob = Glob::new(pattern)
                    .map_err(|e| UsageError(format!("--only `{pattern}` is not a valid pattern: {e}")))?;
                builder.add(glob);
            }
            let set = builder.build().map_err(|e| UsageError(format!("--only: {e}")))?;
            let keys: Vec<(String, Vec<String>)> =
                plan.nodes().map(|n| (key_of(n).to_string(), needs_of(n).to_vec())).collect();
            let chosen: Vec<&(String, Vec<String>)> = plan
                .nodes()
                .zip(&keys)
                .filter(|(n, _)| set.is_match(n.id()) || set.is_match(key_of(n)))
                .map(|(_, k)| k)
                .collect();
            if chosen.is_empty() {
                let ids: Vec<&str> = plan.nodes().map(|n| n.id()).collect();
                return Err(UsageError(format!(
                    "--only {} matches no agent; the agents are: {}",
                    only.join(" --only "),
                    ids.join(", ")
                )));
            }
            let mut stack: Vec<String> = chosen.iter().flat_map(|(_, needs)| needs.clone()).collect();
            while let Some(key) = stack.pop() {
                if selection.upstream.insert(key.clone()) {
                    stack.extend(keys.iter().filter(|(k, _)| *k == key).flat_map(|(_, n)| n.clone()));
                }
            }
            selection.only = Some(set);
        }
        if let Some(shard) = shard {
            // Everything a sharded agent needs must be known before the shards start.
            for node in plan.nodes() {
                if !selection.runs_in_shard(node.id()) || selection.prior.contains_key(node.id()) {
                    continue;
                }
                for need in needs_of(node) {
                    let provided = selection.prior.values().any(|r| r.agent == *need);
                    if !provided {
                        return Err(UsageError(format!(
                            "shard {shard} runs `{}`, which needs `{need}`: run `{need}` first (for example with \
                             --only {need}) and pass its run directory with --from DIR, so every shard sees the \
                             same results",
                            node.id()
                        )));
                    }
                }
            }
        }
        Ok(selection)
    }

    fn runs_in_shard(&self, id: &str) -> bool {
        self.shard.is_none_or(|s| shard_of(id, s.count) == s.index)
    }

    /// Whether the agent `id` (of key `key`) runs in this process (before prior results
    /// are considered).
    pub fn selects(&self, id: &str, key: &str) -> bool {
        let only = match &self.only {
            Some(set) => set.is_match(id) || set.is_match(key) || self.upstream.contains(key),
            None => true,
        };
        only && self.runs_in_shard(id)
    }
}

fn key_of(node: &PlanNode) -> &str {
    match node {
        PlanNode::Agent(spec) => &spec.agent,
        PlanNode::DynamicFanOut(d) => &d.id,
    }
}

fn needs_of(node: &PlanNode) -> &[String] {
    match node {
        PlanNode::Agent(spec) => &spec.needs,
        PlanNode::DynamicFanOut(d) => &d.needs,
    }
}

/// The succeeded agents of the run in `dir`.
fn load_prior(dir: &Path) -> Result<HashMap<String, AgentReport>, UsageError> {
    let report = super::report::read(dir)?;
    Ok(report.agents.into_iter().filter(|a| a.status == AgentStatus::Succeeded).map(|a| (a.id.clone(), a)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_hash_stably() {
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, count: 4 }));
        for bad in ["0/4", "5/4", "1/0", "x", "1/"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        // FNV-1a of the id: these values must never change, or shards of one batch run by
        // different orch versions would overlap.
        assert_eq!([shard_of("fix/core", 4), shard_of("survey", 4), shard_of("work/1", 4)], [3, 4, 1]);
        assert_eq!([shard_of("fix/core", 7), shard_of("survey", 7), shard_of("work/1", 7)], [7, 5, 5]);
        let counts = (0..400).fold([0u32; 4], |mut c, i| {
            c[(shard_of(&format!("fix/{i}"), 4) - 1) as usize] += 1;
            c
        });
        assert!(counts.iter().all(|&n| n > 70), "{counts:?}");
        assert_eq!(shard_of("a", 1), 1);
    }
}
