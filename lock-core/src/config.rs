//! Client settings and their defaults.

use std::time::Duration;

use crate::Error;

/// Settings of a [`crate::Locks`] client. Build with [`crate::LocksBuilder`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Lease of a lock taken without an explicit lease; the watchdog keeps renewing it
    /// while the guard lives. Default: 30 s.
    pub watchdog_lease: Duration,
    /// How often the watchdog renews. Default: a third of `watchdog_lease`.
    pub renew_interval: Duration,
    /// Clock drift allowed for, as a fraction of a lease. A guard considers itself expired
    /// `lease * drift_factor + drift_floor` before the server would. Default: 0.01.
    pub drift_factor: f64,
    /// The fixed part of the drift margin. Default: 2 ms.
    pub drift_floor: Duration,
    /// How long a waiter waits before it counts as starving and reserves the lock's next
    /// free moment against newcomers (see [`crate::Waiting::starving`]).
    /// Default: 10 ms. `None` turns reservations off: pure barging.
    pub starvation_threshold: Option<Duration>,
    /// Issue a fencing token with every fresh acquisition ([`crate::Guard::fencing_token`]).
    /// Costs one counter key per lock name that never expires. Default: off.
    pub fencing: bool,
    /// How long a fair-lock waiter keeps its place in the queue between its own attempts;
    /// live waiters ask again well within it, so this is how long a waiter that died can
    /// hold up the queue. Default: 5 s.
    pub fair_waiter_timeout: Duration,
    /// How long a request whose outcome is unknown (a connection error: it may have run)
    /// is sent again, and how long backends remember each request's answer for that.
    /// A waiting acquisition retries within its wait; a grant nobody learnt of is undone
    /// within this window. Default: 5 s; at most [`MAX_RETRY_WINDOW`].
    pub retry_window: Duration,
    /// The client's name, shown with its holds by introspection. Default: `None`,
    /// which names it `<host>:<pid>`.
    pub client_name: Option<String>,
}

/// The longest [`Config::retry_window`]: stores that keep one retention for every ended
/// acquisition (PostgreSQL keeps them a minute) count on it.
pub const MAX_RETRY_WINDOW: Duration = Duration::from_secs(30);

impl Default for Config {
    fn default() -> Self {
        let watchdog_lease = Duration::from_secs(30);
        Self {
            watchdog_lease,
            renew_interval: watchdog_lease / 3,
            drift_factor: 0.01,
            drift_floor: Duration::from_millis(2),
            starvation_threshold: Some(Duration::from_millis(10)),
            fencing: false,
            fair_waiter_timeout: crate::backend::DEFAULT_PLACE_KEPT_FOR,
            retry_window: crate::backend::DEFAULT_RETRY_WINDOW,
            client_name: None,
        }
    }
}

impl Config {
    /// The safety margin for a lease: how much earlier than the server the client gives
    /// a hold up.
    #[must_use]
    pub fn drift(&self, lease: Duration) -> Duration {
        lease.mul_f64(self.drift_factor) + self.drift_floor
    }

    /// Rejects a lease that is zero, overflowing, or so short that the drift margin
    /// takes more than half of it: its guard would come back lost, or all but.
    pub(crate) fn check_lease(&self, argument: &'static str, lease: Duration) -> Result<(), Error> {
        check_lease(argument, lease)?;
        let margin = self.drift(lease);
        if lease.saturating_sub(margin) < margin {
            return Err(Error::invalid_argument(
                argument,
                format!(
                    "{lease:?} is too short: the clock-drift margin of {margin:?} would take \
                     more than half of it"
                ),
            ));
        }
        Ok(())
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        self.check_lease("watchdog_lease", self.watchdog_lease)?;
        if self.renew_interval.is_zero() {
            return Err(Error::invalid_argument(
                "renew_interval",
                "must be positive",
            ));
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(Error::invalid_argument(
                "drift_factor",
                "must be at least 0 and below 0.5",
            ));
        }
        if self.fair_waiter_timeout < Duration::from_millis(3) {
            return Err(Error::invalid_argument(
                "fair_waiter_timeout",
                "must be at least 3 ms: waiters re-arm their place every third of it",
            ));
        }
        check_bound("fair_waiter_timeout", self.fair_waiter_timeout)?;
        if self.retry_window < Duration::from_millis(1) {
            return Err(Error::invalid_argument(
                "retry_window",
                "must be at least 1 ms: backends remember answers that long",
            ));
        }
        if self.retry_window > MAX_RETRY_WINDOW {
            return Err(Error::invalid_argument(
                "retry_window",
                "must be at most 30 s: stores remember an ended acquisition for twice the \
                 longest window, so that a late copy of one of its requests grants nothing",
            ));
        }
        self.check_renewable("watchdog_lease", self.watchdog_lease)
    }

    /// How often the watchdog renews a hold whose renewals are for `lease`: the client's
    /// [`renew_interval`](Config::renew_interval) for its own watchdog lease, else a
    /// third of `lease`.
    pub(crate) fn renew_interval_for(&self, lease: Duration) -> Duration {
        if lease == self.watchdog_lease {
            self.renew_interval
        } else {
            lease / 3
        }
    }

    /// Rejects a watchdog lease that a renewal could not re-arm in time: one must arrive
    /// before the lease, less the drift margin, runs out.
    pub(crate) fn check_renewable(
        &self,
        argument: &'static str,
        lease: Duration,
    ) -> Result<(), Error> {
        self.check_lease(argument, lease)?;
        let interval = self.renew_interval_for(lease);
        if interval >= lease.saturating_sub(self.drift(lease)) {
            return Err(Error::invalid_argument(
                argument,
                format!(
                    "a lease of {lease:?} is too short for renewals every {interval:?}: it must \
                     exceed the renewal interval plus the drift margin of {:?}",
                    self.drift(lease)
                ),
            ));
        }
        Ok(())
    }
}

/// The longest lease or wait accepted: about 292 years would overflow clocks and
/// backends' millisecond arithmetic well before; a year is more than any lock needs.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Rejects zero and overflowing leases.
pub(crate) fn check_lease(argument: &'static str, lease: Duration) -> Result<(), Error> {
    if lease < Duration::from_millis(1) {
        return Err(Error::invalid_argument(
            argument,
            "a lease must be at least 1 ms",
        ));
    }
    check_bound(argument, lease)
}

/// Rejects durations too large to add to a clock.
pub(crate) fn check_bound(argument: &'static str, d: Duration) -> Result<(), Error> {
    if d > MAX_DURATION {
        return Err(Error::invalid_argument(
            argument,
            format!("{d:?} is longer than the maximum of {MAX_DURATION:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = Config::default();
        assert_eq!(c.watchdog_lease, Duration::from_secs(30));
        assert_eq!(c.renew_interval, Duration::from_secs(10));
        assert!(c.validate().is_ok());
        assert_eq!(c.drift(Duration::from_secs(10)), Duration::from_millis(102));
    }

    #[test]
    fn rejects_unusable_settings() {
        let c = Config {
            renew_interval: Duration::from_secs(30),
            ..Config::default()
        };
        assert!(c.validate().unwrap_err().is_invalid_input());
        for refused in [
            check_lease("lease", Duration::ZERO),
            check_lease("lease", Duration::MAX),
            check_bound("wait", Duration::MAX),
        ] {
            assert!(refused.is_err_and(|err| err.is_invalid_input()));
        }
        assert!(check_bound("wait", Duration::ZERO).is_ok());
    }
}
