//! The synchronizers beside the locks: the [`Semaphore`](crate::Semaphore), the
//! [`ExpirableSemaphore`](crate::ExpirableSemaphore) with its leased permits, and the
//! [`CountDownLatch`](crate::CountDownLatch).

pub(crate) mod expirable;
pub(crate) mod latch;
pub(crate) mod leased;
pub(crate) mod leased_permits;
pub(crate) mod semaphore;
pub(crate) mod starvation;

use crate::LockName;
use crate::client::shared::Inner;
use crate::locks::turns::Turn;
use crate::wait::Wait;

/// This client's turn in the line of its waiters for the semaphore `name` (they ask the
/// store one at a time), for a wait of `wait`: `Some(Some(turn))` once it is this
/// waiter's, `Some(None)` for a try, which asks at once beside the line (in it, a try
/// would wait for every waiter ahead, however long each waits), and `None` when a
/// bounded wait ran out in the line.
pub(crate) async fn semaphore_turn(
    client: &Inner,
    name: &LockName,
    wait: Wait,
) -> Option<Option<Turn<LockName, ()>>> {
    match wait {
        Wait::Never => Some(None),
        Wait::Until(_) | Wait::Forever => client
            .semaphore_turns
            .wait(name, wait.deadline())
            .await
            .map(Some),
    }
}
