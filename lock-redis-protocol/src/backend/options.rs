//! [`ProtocolOptions`] and [`PublishMode`]: the settings of the Redis lock protocol.

use std::time::Duration;

use lock_core::Error;

use crate::transport::Topology;

/// How releases are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PublishMode {
    /// As Redisson decides by default: sharded on a cluster whose servers answer
    /// `PUBSUB SHARDNUMSUB` (Redis 7), classic everywhere else. Adapters decide at connect;
    /// a backend given `Auto` undecided publishes classically.
    #[default]
    Auto,
    /// `PUBLISH`/`SUBSCRIBE`: works everywhere; in a cluster every node forwards it.
    Classic,
    /// `SPUBLISH`/`SSUBSCRIBE` (Redis 7 cluster only): only the slot's shard carries it.
    /// A Redisson peer on a Redis 7 cluster uses it, and hears nothing else.
    Sharded,
}

impl PublishMode {
    pub(super) fn command(self) -> &'static str {
        match self {
            Self::Auto | Self::Classic => "publish",
            Self::Sharded => "spublish",
        }
    }

    /// The mode a deployment uses: `Auto` decided by the topology and by whether the
    /// servers support sharded pub/sub (`PUBSUB SHARDNUMSUB` answered), as Redisson
    /// decides. An explicit `Sharded` outside a cluster is a configuration error.
    pub fn decide(self, topology: Topology, sharded_supported: bool) -> Result<Self, Error> {
        match (self, topology) {
            (Self::Auto, Topology::Cluster) if sharded_supported => Ok(Self::Sharded),
            (Self::Auto | Self::Classic, _) => Ok(Self::Classic),
            (Self::Sharded, Topology::Cluster) => Ok(Self::Sharded),
            (Self::Sharded, _) => Err(Error::invalid_config(
                "sharded pub/sub (SPUBLISH) is for Redis Cluster; this deployment is not one",
                None,
            )),
        }
    }
}

/// How the lock scripts reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ServerCode {
    /// Functions where the server can run them and this client may load them when they
    /// are missing; scripts (`EVALSHA`) on a server before Redis 7.0 and where an ACL
    /// refuses `FCALL` or `FUNCTION LOAD` (said once, at warn level, with what to
    /// run). A [`Functions`](ServerCode::Functions) client needs no `EVAL` at all.
    #[default]
    Auto,
    /// Only `FCALL` of the function library (Redis 7.0 or later), for an ACL that allows
    /// `FCALL` and denies `EVAL`/`EVALSHA`. A server without the library gets it loaded
    /// by the client where the ACL allows `FUNCTION LOAD`; otherwise every call fails
    /// with a [`Backend`](lock_core::ErrorKind::Backend) error that says to run `distlock
    /// functions load <url>`, which loads it on every primary.
    Functions,
    /// `EVALSHA` of each script, with `EVAL` (which loads it) after `NOSCRIPT`: every Redis
    /// version, each call defining the helpers its script uses.
    Scripts,
}

/// Settings of the Redis lock protocol.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ProtocolOptions {
    /// How releases are published. Default: [`PublishMode::Auto`].
    pub publish: PublishMode,
    /// Most locks renewed by one script call. Default: 100, as Redisson.
    pub renew_batch: usize,
    /// Grants wait this long after any restart of the server (a new run id), so that no
    /// holder from before can still believe it holds a lock granted again: a restart
    /// without persistence loses every lock, one from an RDB snapshot or an AOF written
    /// every second loses the latest grants, and a promotion (a failover, or a failback
    /// after a full resync) may bring back an older dataset without any restart. Each of
    /// these gives the server a new replication id, which the acquire scripts read with
    /// `INFO replication` (about 2 us of server time per acquisition), so an ACL user
    /// needs `+info`. Set it to at least the longest lease in use; the first use of a
    /// fresh server waits it too. Default: off (see the README for why).
    pub restart_quarantine: Option<Duration>,
    /// Wait for this many replicas (`WAIT`) after every acquisition and renewal, each
    /// time for at most the given time, as Redisson's replica sync check does; fewer is
    /// a `Backend` error whose source is [`NotReplicated`](crate::NotReplicated) (and an
    /// unconfirmed acquisition is released again). With
    /// it, a lock survives a failover to a replica. Default: off.
    pub replica_ack: Option<(u32, Duration)>,
    /// How the scripts reach the server: Redis Functions or `EVALSHA`. Default:
    /// [`ServerCode::Auto`].
    pub server_code: ServerCode,
    /// How long a starving waiter's reservation of a lock's next free moment lasts
    /// without being refreshed; it bounds how long a waiter that died while starving can
    /// keep a free lock from others. Default: 100 ms.
    pub reservation: Duration,
}

impl Default for ProtocolOptions {
    fn default() -> Self {
        Self {
            publish: PublishMode::Auto,
            renew_batch: 100,
            reservation: Duration::from_millis(100),
            restart_quarantine: None,
            replica_ack: None,
            server_code: ServerCode::Auto,
        }
    }
}

impl ProtocolOptions {
    /// Sets how releases are published.
    #[must_use]
    pub fn publish(mut self, mode: PublishMode) -> Self {
        self.publish = mode;
        self
    }

    /// Makes grants wait `quarantine` after any restart of the server (see
    /// [`ProtocolOptions::restart_quarantine`]).
    #[must_use]
    pub fn restart_quarantine(mut self, quarantine: Option<Duration>) -> Self {
        self.restart_quarantine = quarantine;
        self
    }

    /// Requires `replicas` replicas to confirm every acquisition and renewal within
    /// `timeout` (see [`ProtocolOptions::replica_ack`]).
    #[must_use]
    pub fn replica_ack(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_ack = Some((replicas, timeout));
        self
    }

    /// Sets how long a starving waiter's reservation lasts (at least 1 ms), and how long a
    /// mutex release offers the lock to the waiting client it picked.
    #[must_use]
    pub fn reservation(mut self, lifetime: Duration) -> Self {
        self.reservation = lifetime.max(Duration::from_millis(1));
        self
    }

    /// Sets how the scripts reach the server (see [`ServerCode`]).
    #[must_use]
    pub fn server_code(mut self, code: ServerCode) -> Self {
        self.server_code = code;
        self
    }

    /// Sets the most locks renewed by one script call (at least 1).
    #[must_use]
    pub fn renew_batch(mut self, size: usize) -> Self {
        self.renew_batch = size.max(1);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_publish_mode_is_decided_as_redisson_decides_it() {
        let cases = [
            (
                PublishMode::Auto,
                Topology::Cluster,
                true,
                Some(PublishMode::Sharded),
            ),
            (
                PublishMode::Auto,
                Topology::Cluster,
                false,
                Some(PublishMode::Classic),
            ),
            (
                PublishMode::Auto,
                Topology::Single,
                true,
                Some(PublishMode::Classic),
            ),
            (
                PublishMode::Classic,
                Topology::Cluster,
                true,
                Some(PublishMode::Classic),
            ),
            (
                PublishMode::Sharded,
                Topology::Cluster,
                false,
                Some(PublishMode::Sharded),
            ),
            (PublishMode::Sharded, Topology::Single, true, None),
        ];
        for (mode, topology, supported, expected) in cases {
            let decided = mode.decide(topology, supported).ok();
            assert_eq!(decided, expected, "{mode:?} on {topology:?} ({supported})");
        }
    }
}
