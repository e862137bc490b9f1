//! The operator, and the store's replication: force-releases mutexes now and then, at
//! random and right after a hand-over (between the hand-over and its take-up, where the
//! third review's R1 lived); lets the store's replica catch up now and then, and now and
//! then fails the store over to it, losing every lock write since (where R4 lived). Each
//! force-release is noted in the ledger: it revokes every guard of the name's holds so
//! far, and the checker expects them to learn it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::{Backend, Introspect, LockKind, LockName, LockRef, Owner};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::timeout;

use super::MUTEX_NAMES;
use super::ledger::Ledger;
use crate::faults::Network;

/// How often (in 100) a hand-over of a mutex is followed by a force-release of it.
const AFTER_HAND_OVER: u64 = 20;

/// Of 100 turns of the operator at random: below this the replica catches up, below
/// [`FAIL_OVER`] the store fails over, and the rest force-release a mutex.
const REPLICATE: u64 = 50;

/// See [`REPLICATE`].
const FAIL_OVER: u64 = 58;

/// How long the operator waits between its turns at random (at least).
const BETWEEN: Duration = Duration::from_millis(150);

pub(super) struct Operator {
    pub(super) store: Arc<MemoryBackend>,
    pub(super) ledger: Arc<Ledger>,
    pub(super) network: Arc<Network>,
    /// The names handed over, as the store's hand-over hook sends them.
    pub(super) handed: UnboundedReceiver<&'static str>,
    pub(super) working: Arc<AtomicBool>,
}

impl Operator {
    /// Whether to force-release `name` after its hand-over: the store's hook asks.
    pub(super) fn follows_hand_over(network: &Network, name: &str) -> Option<&'static str> {
        let name = MUTEX_NAMES.iter().find(|mutex| **mutex == name)?;
        network
            .draw(|rng| rng.chance(AFTER_HAND_OVER))
            .then_some(*name)
    }

    pub(super) async fn run(mut self) {
        while self.working.load(Ordering::Relaxed) {
            let pause = BETWEEN + self.network.draw(|rng| rng.millis_below(600));
            match timeout(pause, self.handed.recv()).await {
                Ok(Some(name)) => {
                    let after = self.network.draw(|rng| rng.millis_below(30));
                    crate::nap(after).await;
                    self.force(name).await;
                }
                Ok(None) => return,
                Err(_) => match self.network.draw(|rng| rng.below(100)) {
                    0..REPLICATE => {
                        self.store.replicate();
                        self.network.trace.note("the store's replica catches up");
                    }
                    REPLICATE..FAIL_OVER => {
                        self.store.fail_over();
                        self.network
                            .trace
                            .note("the store fails over, losing the lock writes since its replica caught up");
                    }
                    _ => {
                        let name = self.network.draw(|rng| rng.pick(&MUTEX_NAMES));
                        self.force(name).await;
                    }
                },
            }
        }
    }

    async fn force(&self, name: &'static str) {
        let Ok(lock_name) = LockName::new(name) else {
            return;
        };
        // Read and deleted in one go: the memory store answers both without yielding.
        let token = match self.store.describe(&lock_name).await {
            Ok(info) => info.fencing_token.unwrap_or(0),
            Err(err) => {
                self.ledger
                    .fail(format!("the operator could not read {name}: {err}"));
                return;
            }
        };
        let lock = LockRef::new(LockKind::Mutex, lock_name, Owner::new("operator", "sim"));
        match self.store.force_release(&lock).await {
            Ok(true) => {
                self.ledger.forced(name, token);
                self.network.trace.note(&format!(
                    "the operator force-releases {name} (token {token})"
                ));
            }
            Ok(false) => {}
            Err(err) => self.ledger.fail(format!(
                "the operator could not force-release {name}: {err}"
            )),
        }
    }
}
