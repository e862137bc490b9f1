//! One transaction at a time per name and client: operations on a name that arrive while
//! its transaction runs wait for the next one, which applies them all, in arrival order,
//! each its own step of the machine.
//!
//! Without it, a client's many waiters for one name (a fair lock's queue) each ran a
//! transaction of their own, and every one of them locked the name's row, read and wrote
//! its whole state: with 500 waiters asking again every few seconds the row's lock was
//! never free. A batch takes the row once for all of them. The answers are those of the
//! operations run one after another, which a batch is.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use lock_core::Error;
use tokio::sync::oneshot;

use crate::mailbox::Notice;
use crate::store::{Slot, Store};

/// An operation on one name: a step of its machine that keeps its own answer and
/// returns its notices. It may run more than once (a deadlock's victim runs again).
pub(crate) type Op = Arc<dyn Fn(&mut Slot, u64) -> Vec<Notice> + Send + Sync>;

/// An operation waiting for its name's next transaction, and who waits for its end.
struct Pending {
    op: Op,
    done: oneshot::Sender<Result<(), Error>>,
}

/// The operations waiting per name; a name is present while its transactions run.
#[derive(Default)]
pub(crate) struct Batches {
    waiting: Mutex<HashMap<String, Vec<Pending>>>,
}

impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = self
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        f.debug_struct("Batches").field("names", &names).finish()
    }
}

impl Batches {
    /// Runs `op` on `name` in the name's next transaction and returns when it
    /// committed.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the transaction runs in a task of its own, to its end.
    pub(crate) async fn run(
        &self,
        store: &Store,
        name: &str,
        during: &'static str,
        op: Op,
    ) -> Result<(), Error> {
        let (done, committed) = oneshot::channel();
        let pending = Pending { op, done };
        let first = {
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            match waiting.get_mut(name) {
                Some(queue) => {
                    queue.push(pending);
                    None
                }
                None => {
                    waiting.insert(name.to_owned(), Vec::new());
                    Some(pending)
                }
            }
        };
        if let Some(first) = first {
            let (store, name) = (store.clone(), name.to_owned());
            tokio::spawn(async move { store.batches().drain(&store, name, during, first).await });
        }
        committed.await.map_err(|_| {
            Error::backend(
                during,
                std::io::Error::other("the transaction's task ended"),
            )
        })?
    }

    /// Runs the transactions of `name` until nothing waits: `first`, then whatever
    /// arrived meanwhile.
    async fn drain(&self, store: &Store, name: String, during: &'static str, first: Pending) {
        // Should this task end early (a panic), the name must not stay marked as running:
        // its later operations would wait for a transaction that never comes.
        let mut running = Running {
            batches: self,
            name: &name,
            armed: true,
        };
        let mut batch = vec![first];
        loop {
            let ops: Vec<Op> = batch
                .iter()
                .map(|pending| Arc::clone(&pending.op))
                .collect();
            let committed = store
                .run(vec![name.clone()], during, move |slots, clock| {
                    let Some(slot) = slots.first_mut() else {
                        return ((), Vec::new());
                    };
                    let notices = ops.iter().flat_map(|op| op(slot, clock)).collect();
                    ((), notices)
                })
                .await;
            for pending in batch {
                // A caller that gave up no longer waits for the answer; the operation
                // ran all the same.
                if pending.done.send(committed.clone()).is_err() {
                    tracing::trace!(
                        target: lock_core::TRACING_TARGET,
                        "an operation's caller left before its transaction committed"
                    );
                }
            }
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            let next = waiting
                .get_mut(&name)
                .map(std::mem::take)
                .unwrap_or_default();
            if next.is_empty() {
                // Under the same lock as the check: an operation that arrives after it
                // starts a transaction of its own.
                waiting.remove(&name);
                running.armed = false;
                return;
            }
            batch = next;
        }
    }
}

/// Marks a name's transactions as running. Dropped while armed (the task ended early),
/// it unmarks the name, and the operations still waiting learn that their transaction
/// will not come.
struct Running<'a> {
    batches: &'a Batches,
    name: &'a str,
    armed: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut waiting = self
                .batches
                .waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            waiting.remove(self.name);
        }
    }
}
