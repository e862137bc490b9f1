//! What the Redis protocol reports through `tracing`, under the same target as lock-core
//! (`lock`), so that one directive covers every event of the library.

use std::time::Duration;

use lock_core::throttle::Throttle;
use lock_core::{Error, LockName, LockRef};

const TARGET: &str = lock_core::TRACING_TARGET;

/// An acquisition that too few replicas confirmed could not be given back: it stays held
/// until its lease ends.
pub(crate) fn unconfirmed_grant_kept(lock: &LockRef, err: &Error) {
    tracing::warn!(
        target: TARGET,
        kind = %lock.kind,
        name = %lock.name,
        error = %err.chain(),
        "releasing an acquisition no replica confirmed failed; it stays held until its lease ends"
    );
}

/// The server restarted (a new run id) within the restart quarantine: no lock is granted
/// until it ends, so that no holder from before the restart overlaps a new one. Warned
/// at most once a second, however many waiters meet it.
pub(crate) fn quarantine_active(name: &LockName, left: Option<Duration>) {
    static THROTTLE: Throttle = Throttle::new(Duration::from_secs(1));
    if THROTTLE.admit().is_none() {
        return;
    }
    tracing::warn!(
        target: TARGET,
        %name,
        left_ms = left.map_or(0, |left| left.as_millis()),
        "restart quarantine active: the server restarted recently and grants no lock \
         until the longest lease from before has run out"
    );
}

/// The server refused this client's subscription to its own channel (an ACL that allows
/// only the locks' channels, say): releases wake it on the locks' channels, as they wake
/// every other client there. Reported once per client.
pub(crate) fn own_channel_refused(err: &Error) {
    tracing::info!(
        target: TARGET,
        error = %err.chain(),
        "the server refused this client's own wake-up channel; releases wake it on the \
         locks' channels instead"
    );
}
