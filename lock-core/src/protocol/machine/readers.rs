//! A read-write lock's readers on the machine: the read attempt, the release of a read
//! grant, the renewal of an owner's reads, and the force-release of either side (the
//! rules are the module docs' of [`crate::protocol`]).

use super::{HandOver, Name, Reading, Record, Reply, Side};

impl<I, O, A> Name<I, O, A>
where
    I: Copy + Ord,
    O: Clone + PartialEq,
    A: Clone,
{
    /// A read attempt: granted beside other readers and beside its owner's own write
    /// hold, never beside another owner's. A reader never waits in line (a release wakes
    /// every reader), and reads are served while writers wait, as the older protocol's are.
    pub(super) fn read(&mut self, id: I, owner: O, lease: u64) -> Reply<I> {
        if lease > self.longest_lease {
            return Reply::Refused;
        }
        let now = self.now;
        match self.records.get(&id).map(|(record, _)| *record) {
            Some(Record::Ended) => return Reply::Ended,
            // As for writers: nothing is granted or found again during a quarantine.
            _ if self.quarantine_until > now => return Reply::Busy,
            Some(Record::Granted(first) | Record::Handed(first)) => {
                let alive = self
                    .readers
                    .iter_mut()
                    .filter(|r| r.owner == owner)
                    .flat_map(|r| r.grants.iter_mut())
                    .find(|(grant, _)| *grant == id);
                let Some((_, expires)) = alive else {
                    return Reply::Ended;
                };
                *expires = (*expires).max(now.saturating_add(lease));
                self.record(id, Record::Granted(first));
                return first;
            }
            None => {}
        }
        if self.hold.as_ref().is_some_and(|h| h.owner != owner) {
            return Reply::Busy;
        }
        let at = match self.readers.iter().position(|r| r.owner == owner) {
            Some(at) => at,
            None => {
                self.token += 1;
                self.readers.push(Reading {
                    owner,
                    grants: Vec::new(),
                    origin: id,
                    token: self.token,
                });
                self.readers.len() - 1
            }
        };
        self.longest_granted = self.longest_granted.max(lease);
        let reading = &mut self.readers[at];
        reading.grants.push((id, now.saturating_add(lease)));
        let reply = Reply::Acquired {
            holds: u32::try_from(reading.grants.len()).unwrap_or(u32::MAX),
            token: reading.token,
            origin: reading.origin,
        };
        self.record(id, Record::Granted(reply));
        reply
    }

    /// Ends read grant `id` of `owner`; the owner's read hold ends with its last grant,
    /// and the lock, once nobody holds it, goes to the next writer.
    pub(super) fn release_read(
        &mut self,
        id: I,
        owner: &O,
        handed: &mut Option<HandOver<I, O, A>>,
    ) -> Reply<I> {
        self.record(id, Record::Ended);
        let Some(at) = self
            .readers
            .iter()
            .position(|r| r.owner == *owner && r.grants.iter().any(|(grant, _)| *grant == id))
        else {
            return Reply::NotHeld;
        };
        let reading = &mut self.readers[at];
        reading.grants.retain(|(grant, _)| *grant != id);
        if let Some(left) = u32::try_from(reading.grants.len()).ok().filter(|n| *n > 0) {
            return Reply::StillHeld(left);
        }
        self.readers.remove(at);
        *handed = self.serve();
        Reply::Released
    }

    /// Re-arms every read grant of `owner` (never shortening one); answers with the
    /// grant that began its read hold.
    pub(super) fn renew_reads(&mut self, owner: &O, lease: u64) -> Reply<I> {
        if lease > self.longest_lease {
            return Reply::Refused;
        }
        let until = self.now.saturating_add(lease);
        match self.readers.iter_mut().find(|r| r.owner == *owner) {
            Some(reading) => {
                for (_, expires) in &mut reading.grants {
                    *expires = (*expires).max(until);
                }
                Reply::Renewed {
                    origin: reading.origin,
                }
            }
            None => Reply::Gone,
        }
    }

    /// Deletes the holds of `side`: the writer's (its own read holds go with it), or
    /// the readers' when no writer holds; whether there were any.
    pub(super) fn force_release(&mut self, side: Side) -> bool {
        match side {
            Side::Write if self.hold.is_some() => {
                self.hold = None;
                self.readers.clear();
                true
            }
            Side::Read if self.hold.is_none() && !self.readers.is_empty() => {
                self.readers.clear();
                true
            }
            _ => false,
        }
    }
}
