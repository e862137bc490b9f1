//! What the registry and the readers report through `tracing`.

use crate::throttle::Throttle;
use crate::{Error, TRACING_TARGET};

pub(crate) fn subscribe_failed(channel: &str, err: &Error) {
    static THROTTLE: Throttle = Throttle::new(crate::events::REPEATED_FAILURE_EVERY);
    let Some(held_back) = THROTTLE.admit() else {
        return;
    };
    tracing::warn!(
        target: TRACING_TARGET,
        channel,
        error = %err.chain(),
        held_back,
        "subscribing to release notifications failed (one warning every 5 s)"
    );
}

pub(crate) fn unsubscribe_failed(channel: &str, err: &Error) {
    tracing::warn!(
        target: TRACING_TARGET,
        channel,
        error = %err.chain(),
        "unsubscribing from release notifications failed"
    );
}

pub(crate) fn notifications_lost() {
    static THROTTLE: Throttle = Throttle::new(crate::events::REPEATED_FAILURE_EVERY);
    let Some(held_back) = THROTTLE.admit() else {
        return;
    };
    tracing::warn!(
        target: TRACING_TARGET,
        held_back,
        "notification connection lost; reconnecting (waiters fall back to the holders' leases meanwhile; one warning every 5 s)"
    );
}

pub(crate) fn notifications_dropped() {
    tracing::warn!(
        target: TRACING_TARGET,
        "release notifications were dropped (a lagging reader); every waiter re-polls"
    );
}

pub(crate) fn resubscribed(channels: usize, failed: usize) {
    if failed == 0 {
        tracing::info!(
            target: TRACING_TARGET,
            channels,
            "notification connection restored; every waiter re-polls"
        );
    } else {
        tracing::warn!(
            target: TRACING_TARGET,
            channels,
            failed,
            "notification connection restored, but some channels could not be subscribed \
             again; their waiters re-poll at the holder's lease"
        );
    }
}

/// The notification worker had died and is started again.
pub(crate) fn notification_reader_restarted() {
    tracing::warn!(
        target: TRACING_TARGET,
        "the notification reader had died (its runtime shut down?); connecting it again"
    );
}

pub(crate) fn subscription_worker_restarted() {
    tracing::warn!(
        target: TRACING_TARGET,
        "the notification worker had died (its runtime shut down?); started again"
    );
}
