//! A proptest over the loader: random bytes, truncated and mutated workflows, alias
//! bombs of every shape. No input may panic, and none may make the loader hold more
//! than a bounded amount of memory. The case counts are small so this runs in CI in
//! seconds; raise `PROPTEST_CASES` to search longer.

use orch_workflows::yaml::load_value;
use orch_workflows::{LoadOptions, load_bytes};
use proptest::prelude::*;

use crate::alloc::peak_during;
use crate::bounded::alias_bomb;

/// The most heap one load may hold, whatever the input (the input is at most 1 MiB;
/// the alias budget is 16 MiB of copies).
const MEMORY_BOUND: usize = 256 << 20;

const SAMPLE: &str = include_str!("../valid/review.yaml");

/// Loads `bytes` as a workflow and as plain YAML; returns the peak heap of the two.
fn load_both(bytes: &[u8]) -> usize {
    let ((), peak) = peak_during(|| {
        let _ = load_bytes(bytes, "fuzz.yaml", &LoadOptions::default());
        let _ = load_value("fuzz.yaml", bytes);
    });
    peak
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        prop_assert!(load_both(&bytes) < MEMORY_BOUND);
    }

    #[test]
    fn yaml_shaped_noise_never_panics(text in "[a-z:&*\\[\\]{}\\-,'\" \n|>#!%@`]{0,400}") {
        prop_assert!(load_both(text.as_bytes()) < MEMORY_BOUND);
    }

    #[test]
    fn truncated_workflows_never_panic(cut in 0..SAMPLE.len()) {
        prop_assert!(load_both(&SAMPLE.as_bytes()[..cut]) < MEMORY_BOUND);
    }

    #[test]
    fn mutated_workflows_never_panic(edits in proptest::collection::vec((0..SAMPLE.len(), any::<u8>()), 1..8)) {
        let mut bytes = SAMPLE.as_bytes().to_vec();
        for (at, byte) in edits {
            bytes[at] = byte;
        }
        prop_assert!(load_both(&bytes) < MEMORY_BOUND);
    }

    #[test]
    fn alias_bombs_stay_bounded(levels in 1usize..14, width in 1usize..14) {
        let bomb = alias_bomb(levels, width);
        prop_assert!(load_both(bomb.as_bytes()) < MEMORY_BOUND);
    }
}
