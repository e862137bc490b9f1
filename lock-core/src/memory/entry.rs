//! One held read-write lock's entry (its owners' holds and their grants): the memory
//! store's records, and the small rules they keep.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::Mode;
use crate::backend::RequestId;

/// One grant of a hold: the acquire request that got it and, for a read hold, its own
/// expiry (the grants of any other hold share the entry's).
#[derive(Debug, Clone, Copy)]
pub(super) struct Grant {
    pub(super) id: RequestId,
    pub(super) expires: Option<Instant>,
}

/// One owner's hold (a field of the entry): its grants, one per acquisition not yet
/// released, and the grant that began it.
#[derive(Debug, Clone)]
pub(super) struct Field {
    pub(super) origin: RequestId,
    pub(super) grants: Vec<Grant>,
    /// When the hold began, for introspection.
    pub(super) since: std::time::SystemTime,
}

/// One held lock.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    /// `owner` for mutex, fair and read holds, `owner:write` for the writer.
    pub(super) fields: HashMap<String, Field>,
    /// `None` for mutex and fair locks.
    pub(super) mode: Option<Mode>,
    pub(super) expires: Instant,
}

impl Entry {
    pub(super) fn new(mode: Option<Mode>, now: Instant) -> Self {
        Self {
            fields: HashMap::new(),
            mode,
            expires: now,
        }
    }

    /// Extends, never shortens, the expiry (as every backend does).
    pub(super) fn arm(&mut self, now: Instant, lease: Duration) {
        self.expires = self.expires.max(now + lease);
    }

    pub(super) fn count(&self, field: &str) -> u32 {
        self.fields.get(field).map_or(0, |held| {
            u32::try_from(held.grants.len()).unwrap_or(u32::MAX)
        })
    }

    /// Adds `grant` to `field`'s hold (beginning it if there is none); returns the
    /// holds after it and the hold's origin.
    pub(super) fn add(&mut self, field: &str, grant: Grant) -> (u32, RequestId) {
        let held = self
            .fields
            .entry(field.to_owned())
            .or_insert_with(|| Field {
                origin: grant.id,
                grants: Vec::new(),
                since: std::time::SystemTime::now(),
            });
        held.grants.push(grant);
        let holds = u32::try_from(held.grants.len()).unwrap_or(u32::MAX);
        (holds, held.origin)
    }

    /// Drops `owner`'s read grants whose leases ended; returns how many are live.
    pub(super) fn live_reads(&mut self, owner: &str, now: Instant) -> u32 {
        let Some(held) = self.fields.get_mut(owner) else {
            return 0;
        };
        held.grants
            .retain(|grant| grant.expires.is_none_or(|expires| expires > now));
        let live = u32::try_from(held.grants.len()).unwrap_or(u32::MAX);
        if live == 0 {
            self.fields.remove(owner);
        }
        live
    }

    /// The latest expiry of any live read hold.
    pub(super) fn longest_read(&self, now: Instant) -> Option<Instant> {
        self.fields
            .values()
            .flat_map(|held| &held.grants)
            .filter_map(|grant| grant.expires)
            .filter(|expiry| *expiry > now)
            .max()
    }

    /// Ends grant `id` of `field` if it is alive there; returns the holds left, or
    /// `None` when the grant is not alive (never granted, ended, or its hold expired).
    pub(super) fn end(&mut self, field: &str, id: RequestId, now: Instant) -> Option<u32> {
        let held = self.fields.get_mut(field)?;
        let at = held.grants.iter().position(|grant| {
            grant.id == id && grant.expires.is_none_or(|expires| expires > now)
        })?;
        held.grants.swap_remove(at);
        let left = u32::try_from(held.grants.len()).unwrap_or(u32::MAX);
        if left == 0 {
            self.fields.remove(field);
        }
        Some(left)
    }
}
