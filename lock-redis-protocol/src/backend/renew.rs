//! Renewing locks: batches of one kind family in one slot, one script each.

use std::collections::BTreeMap;
use std::time::Duration;

use lock_core::Error;
use lock_core::backend::{LockRef, Renewal, RequestId};

use super::{Family, RedisBackend, millis, unexpected};
use crate::calls;
use crate::error::NotReplicated;
use crate::layout;
use crate::slot::key_slot;
use crate::transport::{Reply, Topology};

/// Renewal scripts take one family of kinds at a time: read holds have their own script.
fn renew_script(family: Family) -> u8 {
    u8::from(family == Family::Read)
}

impl RedisBackend {
    /// Renews `locks` (see `Backend::renew`): one script per slot and family, in
    /// batches.
    pub(super) async fn renew_all(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let lease_ms = millis(lease).to_string();
        // Group by slot in a cluster (one script's keys must share a slot; on a single
        // master every lock fits one group) and by script. Order inside a group follows
        // the input.
        let mut groups: BTreeMap<(u16, u8), Vec<(usize, Family)>> = BTreeMap::new();
        let mut out: Vec<Option<Renewal>> = vec![None; locks.len()];
        for (i, lock) in locks.iter().enumerate() {
            let family = match Family::of(lock.kind) {
                Ok(family) => family,
                Err(err) => {
                    out[i] = Some(Renewal::Failed(err));
                    continue;
                }
            };
            let slot = match self.transport.topology() {
                Topology::Cluster => key_slot(layout::lock_key(&lock.name)),
                _ => 0,
            };
            groups
                .entry((slot, renew_script(family)))
                .or_default()
                .push((i, family));
        }
        let chunks: Vec<Vec<(usize, Family)>> = groups
            .into_values()
            .flat_map(|group| {
                group
                    .chunks(self.options.renew_batch)
                    .map(<[(usize, Family)]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        let calls = chunks.iter().map(|chunk| {
            let refs: Vec<(&LockRef, Family)> = chunk
                .iter()
                .map(|&(i, family)| (&locks[i], family))
                .collect();
            let lease_ms = &lease_ms;
            async move { self.renew_chunk(&refs, lease_ms).await }
        });
        let results = futures_util::future::join_all(calls).await;
        for (chunk, outcomes) in chunks.iter().zip(results) {
            for (&(i, _), outcome) in chunk.iter().zip(outcomes) {
                out[i] = Some(outcome);
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Renewal::Failed(Error::protocol("renewal lost"))))
            .collect()
    }

    /// Renews one batch of locks of one kind family in one slot.
    async fn renew_chunk(&self, locks: &[(&LockRef, Family)], lease_ms: &str) -> Vec<Renewal> {
        // Per lock: the lock, its owner's grants hash and the owner's field, and for read
        // holds the prefix of the owner's hold keys.
        let grants: Vec<String> = locks
            .iter()
            .map(|(l, family)| {
                layout::grants_key(&l.name, l.owner.as_str(), *family == Family::Write)
            })
            .collect();
        let fields: Vec<String> = locks
            .iter()
            .map(|(l, family)| match family {
                Family::Write => format!("{}:write", l.owner),
                Family::Read | Family::Mutex | Family::Fair => l.owner.as_str().to_owned(),
            })
            .collect();
        let reads = locks
            .first()
            .is_some_and(|(_, family)| *family == Family::Read);
        let prefixes: Vec<String> = if reads {
            locks
                .iter()
                .map(|(l, _)| layout::read_hold_prefix(&l.name, l.owner.as_str()))
                .collect()
        } else {
            Vec::new()
        };
        let (script, keys, args) = if reads {
            let items: Vec<calls::RwReadRenewed<'_>> = locks
                .iter()
                .zip(grants.iter().zip(&fields).zip(&prefixes))
                .map(
                    |((l, _), ((grants, owner), hold_prefix))| calls::RwReadRenewed {
                        lock: layout::lock_key(&l.name),
                        grants,
                        owner,
                        hold_prefix,
                    },
                )
                .collect();
            let call = calls::RwReadRenew { lease_ms };
            (
                calls::RwReadRenew::SCRIPT,
                call.keys_with(&items),
                call.args_with(&items),
            )
        } else {
            let items: Vec<calls::MutexRenewed<'_>> = locks
                .iter()
                .zip(grants.iter().zip(&fields))
                .map(|((l, _), (grants, owner))| calls::MutexRenewed {
                    lock: layout::lock_key(&l.name),
                    grants,
                    owner,
                })
                .collect();
            let call = calls::MutexRenew { lease_ms };
            (
                calls::MutexRenew::SCRIPT,
                call.keys_with(&items),
                call.args_with(&items),
            )
        };
        match self.eval_write("renewing", script, &keys, &args).await {
            Ok((_, Some(acknowledged)))
                if self
                    .options
                    .replica_ack
                    .is_some_and(|(wanted, _)| acknowledged < wanted) =>
            {
                let wanted = self.options.replica_ack.map_or(0, |(wanted, _)| wanted);
                locks
                    .iter()
                    .map(|_| {
                        Renewal::Failed(Error::backend_retryable(
                            "renewing",
                            NotReplicated {
                                wanted,
                                acknowledged,
                            },
                        ))
                    })
                    .collect()
            }
            Ok((Reply::Array(items), _)) if items.len() == locks.len() => {
                items.iter().map(renewal).collect()
            }
            Ok((other, _)) => {
                let err = unexpected("renew", &other);
                locks.iter().map(|_| Renewal::Failed(err.clone())).collect()
            }
            Err(err) => locks.iter().map(|_| Renewal::Failed(err.clone())).collect(),
        }
    }
}

/// One lock's answer in a renewal script's reply.
fn renewal(item: &Reply) -> Renewal {
    match item {
        Reply::Int(1) => Renewal::Renewed { origin: None },
        Reply::Bytes(origin) => Renewal::Renewed {
            origin: std::str::from_utf8(origin)
                .ok()
                .and_then(RequestId::from_hex),
        },
        _ => Renewal::Gone,
    }
}
