//! [`ConnectorSettings`]: what every Redis adapter's connector is configured with, with
//! Redisson's defaults. Both adapters take the same struct
//! (`Connector::settings(ConnectorSettings::default().connect_timeout(..))`), so the
//! settings are documented once.

use std::time::Duration;

use crate::{ProtocolOptions, PublishMode, ServerCode};
use lock_core::Error;

/// Redisson's `connectTimeout`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Redisson's `timeout` (response timeout).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Redisson's `pingConnectionInterval`.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(30);

/// Timeouts and protocol options of a connector. Build from [`Default`] with the
/// setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
#[must_use]
pub struct ConnectorSettings {
    /// The longest wait for a connection to be established.
    pub connect_timeout: Duration,
    /// The longest wait for a reply to one command.
    pub response_timeout: Duration,
    /// How often the idle notification connection is pinged.
    pub ping_interval: Duration,
    /// The lock protocol's options.
    pub protocol: ProtocolOptions,
}

impl Default for ConnectorSettings {
    fn default() -> Self {
        Self {
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            ping_interval: DEFAULT_PING_INTERVAL,
            protocol: ProtocolOptions::default(),
        }
    }
}

impl ConnectorSettings {
    /// The longest wait for a connection to be established. Default: 10 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The longest wait for a reply to one command. Default: 3 s.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How often the idle notification connection is pinged, so that a silently dead
    /// connection is noticed and replaced. Default: 30 s.
    pub fn ping_interval(mut self, interval: Duration) -> Self {
        self.ping_interval = interval;
        self
    }

    /// How releases are published. Default: [`PublishMode::Auto`], which decides at
    /// connect the way Redisson does: sharded pub/sub on a Redis 7 cluster, classic
    /// elsewhere, so that a Redisson peer hears our releases and we hear its.
    pub fn publish_mode(mut self, mode: PublishMode) -> Self {
        self.protocol = self.protocol.publish(mode);
        self
    }

    /// Makes grants wait `quarantine` whenever the server's data may have gone back in
    /// time: any restart (a snapshot or an AOF written every second loses the latest
    /// grants too), and any promotion, a failover or a failback after a full resync
    /// (tied to the replication id, which each of these changes), so that a holder from
    /// before can never overlap a new one. Set it to at least the longest lease in use;
    /// a fresh server's first grants wait it too. Needs `INFO` in an ACL. Default: off.
    pub fn restart_quarantine(mut self, quarantine: Duration) -> Self {
        self.protocol = self.protocol.restart_quarantine(Some(quarantine));
        self
    }

    /// Requires `replicas` replicas to confirm every acquisition and renewal within
    /// `timeout` (`WAIT`), as Redisson's replica sync check: a lock then survives a
    /// failover to a replica, and an unconfirmed acquisition fails with a
    /// [`Backend`](lock_core::ErrorKind::Backend) error whose source is
    /// [`NotReplicated`](crate::NotReplicated). Not on Redis Cluster. Default: off.
    pub fn replica_ack(mut self, replicas: u32, timeout: Duration) -> Self {
        self.protocol = self.protocol.replica_ack(replicas, timeout);
        self
    }

    /// How the lock scripts reach the server: Redis Functions (`FCALL` of a library
    /// loaded once per server) or scripts (`EVALSHA`). Default: [`ServerCode::Auto`],
    /// functions where the server has them and this client may load them, scripts
    /// otherwise.
    pub fn server_code(mut self, code: ServerCode) -> Self {
        self.protocol = self.protocol.server_code(code);
        self
    }

    /// Most locks renewed by one script call. Default: 100.
    pub fn renew_batch(mut self, size: usize) -> Self {
        self.protocol = self.protocol.renew_batch(size);
        self
    }

    /// Replaces every lock-protocol setting at once.
    pub fn protocol(mut self, options: ProtocolOptions) -> Self {
        self.protocol = options;
        self
    }

    /// Refuses zero durations.
    pub fn validate(&self) -> Result<(), Error> {
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("response_timeout", self.response_timeout),
            ("ping_interval", self.ping_interval),
        ] {
            if value.is_zero() {
                return Err(Error::invalid_config(
                    format!("{name} must be positive"),
                    None,
                ));
            }
        }
        Ok(())
    }
}

/// Whom `rediss://` connections trust: the system's roots, or one PEM root certificate.
#[derive(Clone, Default)]
pub struct TlsTrust {
    root_certificate: Option<Vec<u8>>,
}

impl TlsTrust {
    /// The PEM root certificate to trust instead of the system's, if one was given.
    #[must_use]
    pub fn root_certificate(&self) -> Option<&[u8]> {
        self.root_certificate.as_deref()
    }

    /// Trusts this PEM root certificate instead of the system's roots.
    pub fn set_root_certificate(&mut self, pem: Vec<u8>) {
        self.root_certificate = Some(pem);
    }
}

impl std::fmt::Debug for TlsTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTrust")
            .field("root_certificate", &self.root_certificate.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_durations_are_refused() {
        assert!(ConnectorSettings::default().validate().is_ok());
        for settings in [
            ConnectorSettings {
                connect_timeout: Duration::ZERO,
                ..ConnectorSettings::default()
            },
            ConnectorSettings {
                response_timeout: Duration::ZERO,
                ..ConnectorSettings::default()
            },
            ConnectorSettings {
                ping_interval: Duration::ZERO,
                ..ConnectorSettings::default()
            },
        ] {
            let err = settings.validate().expect_err("refused");
            assert_eq!(
                err.kind(),
                lock_core::ErrorKind::InvalidConfig,
                "{settings:?}"
            );
        }
    }
}
