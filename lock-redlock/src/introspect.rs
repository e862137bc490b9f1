//! Who holds a composite lock, from what its parts say: a holder is one that holds it on
//! enough parts (a majority of a RedLock's nodes, every part of a MultiLock), with what
//! that many parts agree on.

use std::collections::HashMap;

use lock_core::{Backend, Error, HeldAs, HolderInfo, Introspect, LockInfo};

/// The `needed`-th largest of `values` (the value at least `needed` of them reach).
fn nth_largest<T: Ord + Copy>(mut values: Vec<T>, needed: usize) -> Option<T> {
    values.sort_unstable_by(|a, b| b.cmp(a));
    values.get(needed.checked_sub(1)?).copied()
}

/// What `needed` of the parts' descriptions agree on, under the composite's `name`.
pub(crate) fn composed(name: &str, parts: &[LockInfo], needed: usize) -> LockInfo {
    let mut info = LockInfo::free(name);
    info.waiting = parts.iter().map(|part| part.waiting).max().unwrap_or(0);
    info.fencing_token = nth_largest(
        parts.iter().filter_map(|part| part.fencing_token).collect(),
        needed,
    );
    let mut by_owner: HashMap<&str, Vec<&HolderInfo>> = HashMap::new();
    for holder in parts.iter().flat_map(|part| &part.holders) {
        by_owner
            .entry(holder.owner.as_str())
            .or_default()
            .push(holder);
    }
    for (owner, seen) in by_owner {
        if seen.len() < needed {
            continue;
        }
        let holds = nth_largest(seen.iter().map(|h| h.holds).collect(), needed).unwrap_or(0);
        let mut holder = HolderInfo::new(owner, holds);
        holder.client = seen.iter().find_map(|h| h.client.clone());
        // Held on enough parts from the latest of their starts.
        holder.since = nth_largest(seen.iter().filter_map(|h| h.since).collect(), 1);
        holder.lease_left = nth_largest(seen.iter().filter_map(|h| h.lease_left).collect(), needed);
        info.holders.push(holder);
    }
    info.holders.sort_by(|a, b| a.owner.cmp(&b.owner));
    if !info.holders.is_empty() {
        let mut modes: HashMap<&'static str, (usize, HeldAs)> = HashMap::new();
        for part in parts {
            modes
                .entry(part.held_as.as_str())
                .or_insert((0, part.held_as))
                .0 += 1;
        }
        info.held_as = modes
            .into_values()
            .filter(|(_, held)| *held != HeldAs::Free)
            .max_by_key(|(count, _)| *count)
            .map_or(HeldAs::Exclusive, |(_, held)| held);
        info.lease_left = nth_largest(parts.iter().filter_map(|p| p.lease_left).collect(), needed);
    }
    info
}

/// The names at least `needed` of the parts list.
pub(crate) fn listed_by(parts: Vec<Vec<String>>, needed: usize, limit: usize) -> Vec<String> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    for names in parts {
        for name in names {
            *counts.entry(name).or_default() += 1;
        }
    }
    let mut names: Vec<String> = counts
        .into_iter()
        .filter(|(_, count)| *count >= needed)
        .map(|(name, _)| name)
        .collect();
    names.sort_unstable();
    names.truncate(limit);
    names
}

/// A part's introspection; an error for a part that cannot say who holds its locks.
pub(crate) fn of_part(part: &dyn Backend) -> Result<&dyn Introspect, Error> {
    if !part.capabilities().introspection {
        return Err(Error::unsupported(
            "introspection on a part that does not offer it",
        ));
    }
    Ok(part.introspection())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn held(owner: &str, holds: u32, token: u64) -> LockInfo {
        let mut info = LockInfo::free("n");
        info.held_as = HeldAs::Exclusive;
        info.lease_left = Some(Duration::from_secs(u64::from(holds) * 10));
        info.fencing_token = Some(token);
        let mut holder = HolderInfo::new(owner, holds);
        holder.lease_left = info.lease_left;
        info.holders.push(holder);
        info
    }

    #[test]
    fn a_holder_on_a_majority_is_the_holder() {
        let parts = [held("a:1", 2, 7), held("a:1", 1, 9), held("b:1", 1, 3)];
        let info = composed("n", &parts, 2);
        assert_eq!(info.held_as, HeldAs::Exclusive);
        assert_eq!(info.holders.len(), 1, "{info:?}");
        assert_eq!(info.holders[0].owner, "a:1");
        assert_eq!(info.holders[0].holds, 1, "what two parts agree on");
        assert_eq!(info.fencing_token, Some(7));
        let none = composed("n", &parts, 3);
        assert_eq!(none.held_as, HeldAs::Free);
        assert!(none.holders.is_empty());
    }

    #[test]
    fn names_listed_by_enough_parts() {
        let parts = vec![
            vec!["x".to_owned(), "y".to_owned()],
            vec!["y".to_owned()],
            vec!["x".to_owned(), "y".to_owned(), "z".to_owned()],
        ];
        assert_eq!(listed_by(parts.clone(), 2, 10), ["x", "y"]);
        assert_eq!(listed_by(parts, 3, 10), ["y"]);
    }
}
