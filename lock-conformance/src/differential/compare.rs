//! How the differential test compares a store with the rules' machine: replies in the
//! machine's terms, fencing tokens by their order of issue, and who holds the lock.

use std::collections::HashMap;

use lock_core::backend::{Acquire, Release};
use lock_core::protocol::{Name, Reply};
use lock_core::{Error, HeldAs, LockKind, RequestId};

use super::Client;

/// The store's tokens beside the machine's: the same order of issue.
#[derive(Default)]
pub(super) struct Tokens {
    pairs: Vec<(u64, u64)>,
}

impl Tokens {
    /// Whether the store's `token` may be the machine's `rules`: the same one as
    /// before, or a new one in the same order among those seen.
    pub(super) fn agree(&mut self, token: u64, rules: u64) -> bool {
        if let Some((_, seen)) = self.pairs.iter().find(|(t, _)| *t == token) {
            return *seen == rules;
        }
        let ordered = self
            .pairs
            .iter()
            .all(|(t, r)| (*t < token) == (*r < rules) && *r != rules);
        self.pairs.push((token, rules));
        ordered
    }
}

/// A store's acquire reply in the machine's terms (the store's own token).
pub(super) fn acquired(reply: Result<Acquire, Error>, ids: &HashMap<RequestId, u32>) -> Reply {
    let reply = match reply {
        Ok(reply) => reply,
        Err(Error::WouldDeadlock { .. }) => return Reply::WouldDeadlock,
        Err(err) => panic!("an attempt failed: {err}"),
    };
    match reply {
        Acquire::Acquired {
            holds,
            token,
            origin,
        } => Reply::Acquired {
            holds,
            token: token.unwrap_or(0),
            origin: origin.and_then(|o| ids.get(&o).copied()).unwrap_or(0),
        },
        Acquire::Busy { .. } => Reply::Busy,
        _ => Reply::Ended,
    }
}

pub(super) fn released(reply: Release) -> Reply {
    match reply {
        Release::Released => Reply::Released,
        Release::StillHeld { holds } => Reply::StillHeld(holds),
        _ => Reply::NotHeld,
    }
}

/// Whether the store's reply is the machine's, tokens by order of issue.
pub(super) fn same(store: Reply, rules: Reply, tokens: &mut Tokens) -> bool {
    match (store, rules) {
        (
            Reply::Acquired {
                holds,
                token,
                origin,
            },
            Reply::Acquired {
                holds: h,
                token: t,
                origin: o,
            },
        ) => holds == h && origin == o && tokens.agree(token, t),
        (store, rules) => store == rules,
    }
}

/// Who holds the lock, as a store may describe it: an exclusive lock's owner and its
/// hold count; a read-write lock's writer (stores list its own read holds apart, or
/// not), or else its readers.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Holders {
    Exclusive(u32, usize),
    Writer(u32),
    Readers(Vec<u32>),
    Free,
}

/// Who holds the lock, as the store describes it (free, when it describes none).
pub(super) async fn holders(client: &Client, kind: LockKind) -> Holders {
    if !client.backend.capabilities().introspection {
        return Holders::Free;
    }
    let introspection = client.backend.introspection();
    let info = introspection.describe(&client.lock.name).await.unwrap();
    let owner = |owner: &str| owner.chars().nth(7).and_then(|c| c.to_digit(10));
    let mut owners: Vec<u32> = info
        .holders
        .iter()
        .filter_map(|h| owner(&h.owner))
        .collect();
    owners.sort_unstable();
    owners.dedup();
    match (kind, info.held_as, info.holders.first()) {
        (_, HeldAs::Free, _) | (_, _, None) => Holders::Free,
        (LockKind::Mutex | LockKind::Fair, _, Some(first)) => match owner(&first.owner) {
            Some(owner) => Holders::Exclusive(owner, usize::try_from(first.holds).unwrap()),
            None => Holders::Free,
        },
        (_, HeldAs::Read, _) => Holders::Readers(owners),
        (_, _, Some(first)) => owner(&first.owner).map_or(Holders::Free, Holders::Writer),
    }
}

/// Who holds the lock by the rules.
pub(super) fn rules_holders(machine: &Name, kind: LockKind) -> Holders {
    if let Some(holder) = machine.holder() {
        return match kind {
            LockKind::Mutex | LockKind::Fair => {
                Holders::Exclusive(*holder.owner, holder.grants.len())
            }
            _ => Holders::Writer(*holder.owner),
        };
    }
    let mut readers: Vec<u32> = machine.readers().map(|reader| *reader.owner).collect();
    if readers.is_empty() {
        return Holders::Free;
    }
    readers.sort_unstable();
    Holders::Readers(readers)
}
