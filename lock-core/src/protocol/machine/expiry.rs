//! How time ends a name's holds and read grants, and when a store that forgets drops
//! its records.

use super::{Name, Record};

/// When a machine next does work it may put off (looking its records through). Not
/// part of the state: two machines that differ only by it are equal, and a store does
/// not keep it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LookAt(pub(super) u64);

impl PartialEq for LookAt {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LookAt {}

impl std::hash::Hash for LookAt {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl<I, O, A> Name<I, O, A>
where
    I: Copy + Ord,
    O: Clone + PartialEq,
    A: Clone,
{
    /// A hold whose lease ended is gone; its grants end with it, and so does each read
    /// grant whose own lease ended. Nobody is handed the lock: waiters find it free when
    /// they next ask. A store that forgets drops the records of ids whose grants are not
    /// alive once their retention passed.
    pub(super) fn expire(&mut self) {
        let now = self.now;
        let mut ended = Vec::new();
        if self.hold.as_ref().is_some_and(|h| h.expires <= now)
            && let Some(hold) = self.hold.take()
        {
            ended.extend(hold.grants);
        }
        for reading in &mut self.readers {
            reading.grants.retain(|&(id, expires)| {
                let lives = expires > now;
                if !lives {
                    ended.push(id);
                }
                lives
            });
        }
        self.readers.retain(|reading| !reading.grants.is_empty());
        for id in ended {
            self.record(id, Record::Ended);
        }
        // Records are looked through every quarter of the retention, not at every step:
        // a hot name keeps thousands, and a look at each step made the memory store's
        // pair cost 55 us. A record kept past its retention is safe (it answers a late
        // copy as the first time, or ends it), only kept longer.
        if let Some(retention) = self.retention
            && now >= self.next_forget.0
        {
            self.next_forget = LookAt(now.saturating_add(retention / 4));
            let before = now.saturating_sub(retention);
            let (hold, readers) = (&self.hold, &self.readers);
            self.records.retain(|id, (_, since)| {
                *since >= before
                    || hold.as_ref().is_some_and(|h| h.grants.contains(id))
                    || readers
                        .iter()
                        .any(|r| r.grants.iter().any(|(grant, _)| grant == id))
            });
        }
    }

    /// The first time after now at which time alone may change what the machine does:
    /// a lease or a read grant ends, a waiter loses its place, the quarantine or an
    /// offer ends, or a record comes due to be forgotten (`u64::MAX`: never). Until then,
    /// an event decides as it would now, apart from the times it writes (a lease counted
    /// from a later time ends later): a store that knows the time only within a window
    /// before this may step the machine at the window's end. Of a machine brought to its
    /// time (any step does; a failover's replica may keep overdue holds until then).
    #[must_use]
    pub fn steady_until(&self) -> u64 {
        let now = self.now;
        let holds = self.hold.iter().map(|hold| hold.expires);
        let reads = self
            .readers
            .iter()
            .flat_map(|reading| reading.grants.iter().map(|(_, expires)| *expires));
        let places = self.waiters.iter().map(|waiter| waiter.keeps_until);
        let ends = [self.quarantine_until, self.offered_until];
        // A record is kept while `since >= now - retention`: it may go at the first
        // instant past `since + retention`, and one overdue goes at the next look.
        let records = self.retention.into_iter().flat_map(|retention| {
            self.records
                .values()
                .map(move |(_, since)| since.saturating_add(retention).saturating_add(1))
                .chain([self.next_forget.0])
        });
        holds
            .chain(reads)
            .chain(places)
            .chain(ends)
            .chain(records)
            .filter(|at| *at > now)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Forgets what the store knows of acquisition `id` now, rather than a retention
    /// after its end: its caller says no copy of any of its attempts can reach the store
    /// any more (each was sent once and answered, and the acquisition is over). Kept
    /// while its grant is alive or it waits (it is not over then).
    pub fn forget_settled(&mut self, id: I) {
        let alive = self.hold.as_ref().is_some_and(|h| h.grants.contains(&id))
            || self
                .readers
                .iter()
                .any(|r| r.grants.iter().any(|(grant, _)| *grant == id))
            || self.waiters.iter().any(|w| w.id == id);
        if !alive {
            self.records.remove(&id);
        }
    }
}
