//! The store's analysis of what workers reported: overlapping valid sections, more
//! valid permit holders than permits, and waiters that sat through long free periods.

/// One critical section, on the store's clock (microseconds since the store started).
#[derive(Debug, Clone)]
pub(crate) struct Section {
    pub(crate) worker: String,
    pub(crate) write_mode: bool,
    /// A permit holder's: how many may hold at once.
    pub(crate) capacity: Option<u64>,
    pub(crate) enter: u64,
    /// When the worker was about to check `is_held()`.
    pub(crate) checking: Option<u64>,
    /// `checking`, once the check said held (the worker wrote).
    pub(crate) valid: Option<u64>,
    pub(crate) leave: Option<u64>,
    /// When a force-unlock revoked this section (its start), and by when the worker
    /// must have learnt it.
    pub(crate) revoked: Option<(u64, u64)>,
}

/// Pairs of sections of one name whose valid periods (`enter` to the check that said
/// held) overlap while at least one of them writes (readers may share). A section a
/// force-unlock revoked overlaps those that entered after the force-unlock began by
/// design (revocation with notice: it learns at its next renewal, and its fencing token
/// is the older); whether it learnt in time is `revoked_not_learnt`.
///
/// Returns the pairs, each as the two sections in words.
pub(crate) fn overlapping_pairs(sections: &[Section]) -> Vec<String> {
    let mut valid: Vec<&Section> = sections.iter().filter(|s| s.valid.is_some()).collect();
    valid.sort_by_key(|s| s.enter);
    let mut pairs = Vec::new();
    for (i, a) in valid.iter().enumerate() {
        let a_end = a.valid.unwrap_or(a.enter);
        for b in &valid[i + 1..] {
            if b.enter >= a_end {
                break;
            }
            let revoked_before_b = a.revoked.is_some_and(|(began, _)| b.enter >= began);
            if b.worker != a.worker && (a.write_mode || b.write_mode) && !revoked_before_b {
                pairs.push(format!("{a:?} and {b:?}"));
            }
        }
    }
    pairs
}

/// Permit holders that entered while their semaphore's capacity was already taken by
/// holders valid at that moment, all of them valid (`enter` to the check that said held).
pub(crate) fn over_capacity_valid(sections: &[Section]) -> u64 {
    // Ends sort before starts at the same instant: a hand-over is no overlap.
    let mut events: Vec<(u64, bool, u64)> = sections
        .iter()
        .filter_map(|s| Some((s.capacity?, s.enter, s.valid?)))
        .flat_map(|(capacity, enter, valid)| [(enter, true, capacity), (valid, false, capacity)])
        .collect();
    events.sort_unstable_by_key(|&(at, starts, _)| (at, starts));
    let mut holding = 0u64;
    let mut over = 0;
    for (_, starts, capacity) in events {
        if starts {
            holding += 1;
            if holding > capacity {
                over += 1;
            }
        } else {
            holding = holding.saturating_sub(1);
        }
    }
    over
}

/// Acquisitions whose wait spanned a period of more than `stuck_after` in which nobody
/// held the name and the store could serve (a waiter that should have been served and
/// was not): the longest such period of each. `outages` are the periods in which the
/// store was out of reach (a failover's promotion, a restart): nobody could be served
/// then, so they count as busy.
pub(crate) fn stuck_waiters(
    sections: &[Section],
    waits: &[(u64, u64)],
    (now, outages): (u64, &[(u64, u64)]),
    stuck_after: u64,
) -> Vec<(u64, u64)> {
    let mut busy: Vec<(u64, u64)> = sections
        .iter()
        .map(|s| (s.enter, s.leave.unwrap_or(now)))
        .chain(outages.iter().copied())
        .collect();
    busy.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (start, end) in busy {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let mut stuck = Vec::new();
    for &(from, to) in waits {
        // Free gaps inside [from, to].
        let mut cursor = from;
        let mut longest = (0, 0);
        let mut widen = |gap: (u64, u64)| {
            if gap.1.saturating_sub(gap.0) > longest.1 - longest.0 {
                longest = gap;
            }
        };
        for &(start, end) in &merged {
            if end <= cursor {
                continue;
            }
            if start >= to {
                break;
            }
            widen((cursor, start.max(cursor)));
            cursor = cursor.max(end);
        }
        widen((cursor, to.max(cursor)));
        if longest.1 - longest.0 > stuck_after {
            stuck.push(longest);
        }
    }
    stuck
}
