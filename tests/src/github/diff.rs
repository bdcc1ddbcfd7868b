//! The lines of a unified-diff patch a review comment may land on: the new file's
//! lines in the hunks (added and context lines), as GitHub allows for `side: RIGHT`.

use std::collections::BTreeSet;

/// The new-side line numbers a patch's hunks cover (added and context lines).
pub fn right_lines(patch: &str) -> BTreeSet<u64> {
    sides(patch).1
}

/// The old-side line numbers a patch's hunks cover (removed and context lines).
pub(crate) fn left_lines(patch: &str) -> BTreeSet<u64> {
    sides(patch).0
}

fn sides(patch: &str) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let (mut left, mut right) = (BTreeSet::new(), BTreeSet::new());
    let (mut old, mut new) = (0u64, 0u64);
    let mut in_hunk = false;
    for line in patch.lines() {
        if let Some(header) = line.strip_prefix("@@ ") {
            let mut parts = header.split_whitespace();
            let start = |part: Option<&str>, sign: char| {
                part.and_then(|p| p.strip_prefix(sign))
                    .and_then(|p| p.split(',').next())
                    .and_then(|p| p.parse::<u64>().ok())
            };
            match (start(parts.next(), '-'), start(parts.next(), '+')) {
                (Some(o), Some(n)) => {
                    (old, new) = (o, n);
                    in_hunk = true;
                }
                _ => in_hunk = false,
            }
            continue;
        }
        if !in_hunk {
            continue;
        }
        match line.chars().next() {
            Some('+') => {
                right.insert(new);
                new += 1;
            }
            Some('-') => {
                left.insert(old);
                old += 1;
            }
            Some('\\') => {}
            _ => {
                left.insert(old);
                right.insert(new);
                old += 1;
                new += 1;
            }
        }
    }
    (left, right)
}
