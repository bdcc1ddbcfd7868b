//! Which agents a run actually runs: `--only PATTERN`, `--shard K/N`, and results taken
//! from an earlier run directory (`--from DIR` for upstream results, `--resume DIR` to
//! rerun only what did not succeed).
//!
//! - `--only` selects agents whose id or key matches a glob (`fix/*`, `survey`), plus
//!   every agent they need, so that the selection can run on its own.
//! - `--shard K/N` selects the agents [`assign_shards`] puts in shard `K`: balanced
//!   rendezvous hashing. Every agent ranks the shards by a weight (FNV-1a of its id,
//!   mixed with the shard number); all (agent, shard) pairs are taken from the heaviest
//!   down, and an agent goes to the first shard of its pairs that still has room. Room:
//!   the first `M mod N` shards to fill hold `ceil(M/N)` agents, the others `floor(M/N)`,
//!   so sizes differ by at most one, and an empty shard only exists when there are
//!   fewer agents than shards (`orch plan` then leaves it out of the matrix). The
//!   assignment depends on the ids alone (not their order), so every shard computes the
//!   same one. Adding an agent moves it and, when it changes which shards are full,
//!   usually no other and on average less than one (a strict "moves only the new agent"
//!   cannot hold together with sizes within one: with 2 shards, 3 agents would need
//!   pairwise different shards). The agents known when the run starts are one group; the
//!   instances of a dynamic fan-out are a group of their own, balanced over the same
//!   shards when it expands. Agents a shard needs must come from `--from DIR` (every
//!   shard then sees the same results, and a dynamic fan-out the same items), or the
//!   run refuses to start.
//! - A prior agent that succeeded is not run again: its text and output feed templates
//!   and fan-outs as if it had just run. With `--resume` it also stays in the report,
//!   marked `carried_over`, and its branch (the earlier run's, fetched into the user's
//!   repository) is carried into the new run clone, so integration finds it there.
//! - With `--resume`, an agent that did not succeed but left work (committed at its
//!   end, by a checkpoint, or by `orch recover`) runs again from that commit instead of
//!   the base (`resumed_from` in its report).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use globset::{Glob, GlobSet, GlobSetBuilder};
use orch_workflows::{Plan, PlanNode};

use git2::Oid;

use super::report::{AgentReport, AgentStatus};
use crate::exit::UsageError;
use crate::git::RunClone;

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

/// FNV-1a (64 bits) of an id.
fn fnv(id: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The rendezvous weight of shard `k` (0-based) for an id of hash `hash`: the two mixed
/// through splitmix64's finalizer.
fn weight(hash: u64, k: u32) -> u64 {
    let mut h = hash ^ u64::from(k + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The shard (1-based) of each of `ids` among `count`, by the balanced rendezvous rule
/// of the module docs. Repeated ids count once. The result does not depend on the
/// order of `ids`.
pub fn assign_shards<'a>(ids: impl IntoIterator<Item = &'a str>, count: u32) -> HashMap<String, u32> {
    let count = count.max(1);
    let mut unique: Vec<(&str, u64)> = ids.into_iter().map(|id| (id, fnv(id))).collect();
    unique.sort_unstable();
    unique.dedup();
    let m = unique.len();
    let (floor, mut bigger) = (m / count as usize, m % count as usize);
    let mut pairs: Vec<(u64, usize, u32)> = Vec::with_capacity(m * count as usize);
    for (i, (_, hash)) in unique.iter().enumerate() {
        pairs.extend((0..count).map(|k| (weight(*hash, k), i, k)));
    }
    // Heaviest first; ties by id then shard, so the order is total.
    pairs.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(unique[a.1].0.cmp(unique[b.1].0)).then(a.2.cmp(&b.2)));
    let mut load = vec![0usize; count as usize];
    let mut out: HashMap<String, u32> = HashMap::with_capacity(m);
    for (_, i, k) in pairs {
        let id = unique[i].0;
        if out.contains_key(id) {
            continue;
        }
        let room = if bigger > 0 { floor + 1 } else { floor };
        let slot = &mut load[k as usize];
        if *slot < room {
            *slot += 1;
            if *slot == floor + 1 {
                bigger -= 1;
            }
            out.insert(id.to_owned(), k + 1);
        }
    }
    out
}

/// What to run.
#[derive(Debug, Default)]
pub struct Selection {
    only: Option<GlobSet>,
    /// Agent keys pulled in because a selected agent needs them.
    upstream: BTreeSet<String>,
    shard: Option<Shard>,
    /// The shard of every agent assigned so far (with `--shard`): the plan's agents, then
    /// each dynamic fan-out's instances as they appear.
    shards: std::sync::Mutex<HashMap<String, u32>>,
    /// Succeeded agents of an earlier run, by id.
    pub prior: HashMap<String, AgentReport>,
    /// `--resume`: prior agents stay in the new report.
    pub keep_prior: bool,
    /// `--resume`: the commit each agent that did not succeed had left, by id.
    pub restart: HashMap<String, String>,
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
            let (prior, restart) = load_prior(dir)?;
            selection.prior = prior;
            if resume.is_some() {
                selection.restart = restart;
            }
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
            let known = plan.agents().map(|a| a.id.as_str());
            *selection.shards.get_mut().unwrap_or_else(|p| p.into_inner()) = assign_shards(known, shard.count);
            // Everything a sharded agent needs must be known before the shards start (a
            // dynamic fan-out may put instances in any shard).
            for node in plan.nodes() {
                let anywhere = matches!(node, PlanNode::DynamicFanOut(_));
                if !(anywhere || selection.runs_in_shard(node.id())) || selection.prior.contains_key(node.id()) {
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
        let Some(shard) = self.shard else { return true };
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards.get(id) == Some(&shard.index)
    }

    /// With `--shard`: gives the agents of `specs` that have no shard yet (a dynamic
    /// fan-out's instances, just expanded) theirs, each fan-out's instances balanced as
    /// one group.
    pub fn assign_new<'a>(&self, specs: impl Iterator<Item = &'a orch_workflows::AgentSpec>) {
        let Some(shard) = self.shard else { return };
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let mut groups: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
        for spec in specs.filter(|s| !shards.contains_key(&s.id)) {
            groups.entry(spec.agent.as_str()).or_default().push(spec.id.as_str());
        }
        for ids in groups.into_values() {
            shards.extend(assign_shards(ids, shard.count));
        }
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

impl Selection {
    /// `--resume`: carries the earlier run's work into the new run clone. Each carried
    /// over agent's branch is created there at its commit (read from the user's
    /// repository, where the earlier run fetched it); one that cannot be found there
    /// keeps its report but loses its branch, with a warning. Returns the commits the
    /// agents that run again start from.
    pub fn carry_into(&mut self, clone: &RunClone) -> HashMap<String, Oid> {
        if !self.keep_prior {
            return HashMap::new();
        }
        for prior in self.prior.values_mut() {
            prior.carried_over = true;
            let (Some(branch), Some(commit)) = (&prior.branch, &prior.commit) else { continue };
            let adopted = Oid::from_str(commit)
                .map_err(|e| e.to_string())
                .and_then(|oid| clone.adopt_branch(branch, oid).map_err(|e| e.to_string()));
            if let Err(e) = adopted {
                tracing::warn!(agent = %prior.id, "cannot carry over the branch {branch}: {e}");
                prior.reason = Some(format!("carried over, but its branch {branch} is gone: {e}"));
                prior.branch = None;
                prior.commit = None;
            }
        }
        let mut starts = HashMap::new();
        for (id, commit) in &self.restart {
            match Oid::from_str(commit)
                .map_err(|e| e.to_string())
                .and_then(|oid| clone.has_commit(oid).map(|()| oid).map_err(|e| e.to_string()))
            {
                Ok(oid) => {
                    starts.insert(id.clone(), oid);
                }
                Err(e) => {
                    tracing::warn!(agent = %id, "starts from the base: the earlier run's work {commit} is not in the repository ({e})")
                }
            }
        }
        starts
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
/// The succeeded agents of the run in `dir`, and the commits the others left.
type Prior = (HashMap<String, AgentReport>, HashMap<String, String>);

fn load_prior(dir: &Path) -> Result<Prior, UsageError> {
    let report = super::report::read(dir)?;
    let (succeeded, others): (Vec<AgentReport>, Vec<AgentReport>) =
        report.agents.into_iter().partition(|a| a.status == AgentStatus::Succeeded);
    let restart = others.into_iter().filter_map(|a| a.commit.map(|c| (a.id, c))).collect();
    Ok((succeeded.into_iter().map(|a| (a.id.clone(), a)).collect(), restart))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(shards: &HashMap<String, u32>, count: u32) -> Vec<usize> {
        let mut sizes: Vec<usize> = (1..=count).map(|k| shards.values().filter(|&&s| s == k).count()).collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        sizes
    }

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("fix/{i}")).collect()
    }

    #[test]
    fn shards_parse() {
        assert_eq!("2/4".parse::<Shard>(), Ok(Shard { index: 2, count: 4 }));
        for bad in ["0/4", "5/4", "1/0", "x", "1/"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn shards_are_balanced_within_one() {
        let ten = ids(10);
        assert_eq!(sizes(&assign_shards(ten.iter().map(String::as_str), 4), 4), [3, 3, 2, 2]);
        let three = ids(3);
        let few = assign_shards(three.iter().map(String::as_str), 20);
        assert_eq!(few.values().collect::<BTreeSet<_>>().len(), 3, "{few:?}");
        for (n, count) in [(1, 1), (7, 3), (100, 7), (1000, 32), (5, 5)] {
            let list = ids(n);
            let s = sizes(&assign_shards(list.iter().map(String::as_str), count), count);
            assert_eq!(s.iter().sum::<usize>(), n);
            assert!(s[0] - s[s.len() - 1] <= 1, "{n} in {count}: {s:?}");
        }
    }

    #[test]
    fn shards_are_stable() {
        // Pinned: shards of one batch run by different orch versions must not overlap.
        let ten = ids(10);
        let fixed = assign_shards(ten.iter().map(String::as_str), 4);
        let pinned: Vec<u32> = ten.iter().map(|id| fixed[id]).collect();
        assert_eq!(pinned, [3, 1, 2, 4, 4, 4, 3, 2, 1, 3]);
        // The order of the ids plays no part.
        let reversed = assign_shards(ten.iter().rev().map(String::as_str), 4);
        assert_eq!(fixed, reversed);
        // Adding one agent moves at most one other here (the new agent makes a shard
        // fuller; see the module docs for why none at all cannot be promised).
        for (n, count) in [(10, 4), (20, 20), (5, 4), (3, 20)] {
            let before_ids = ids(n);
            let before = assign_shards(before_ids.iter().map(String::as_str), count);
            let after_ids = ids(n + 1);
            let after = assign_shards(after_ids.iter().map(String::as_str), count);
            let moved: Vec<&String> = before_ids.iter().filter(|id| before[*id] != after[*id]).collect();
            assert!(moved.len() <= 3, "{n} in {count}: {moved:?}");
        }
        // Over many additions, on average less than one other agent moves, never more
        // than a few.
        let (mut total, mut worst) = (0usize, 0usize);
        for n in 1..120 {
            let (a, b) = (ids(n), ids(n + 1));
            let before = assign_shards(a.iter().map(String::as_str), 4);
            let after = assign_shards(b.iter().map(String::as_str), 4);
            let moved = a.iter().filter(|id| before[*id] != after[*id]).count();
            total += moved;
            worst = worst.max(moved);
        }
        assert!(total < 119, "{total} moves in 119 additions");
        assert!(worst <= 4, "{worst}");
    }
}
