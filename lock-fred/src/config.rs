//! From lock-core's URL forms and the connector's settings to fred's configuration.

use std::time::Duration;

use fred::prelude::{
    Builder, Config, ConnectionConfig, PerformanceConfig, ReconnectPolicy, Server, ServerConfig,
    TcpConfig,
};
use fred::types::config::{ClusterDiscoveryPolicy, UnresponsiveConfig};
use lock_core::Error;
pub(crate) use lock_redis_protocol::settings::TlsTrust as Tls;
use lock_redis_protocol::url::{self, Deployment};

/// Reconnect pauses: from 20 ms, doubling, up to 1 s, for ever (a lock client must come
/// back whenever the server does).
const RECONNECT: (u32, u32) = (20, 1_000);

/// Timeouts the connector applies to every client it builds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
}

/// fred's configuration for what `url` names.
pub(crate) fn from_url(url: &str, tls: &Tls) -> Result<Config, Error> {
    let mut config = match url::parse(url)? {
        Deployment::Single(url) => single(&url)?,
        Deployment::Cluster(urls) => {
            let mut config = single(&urls[0])?;
            config.database = None;
            let hosts = urls
                .iter()
                .map(|url| single(url).map(|node| node.server.hosts()[0].clone()))
                .collect::<Result<Vec<Server>, Error>>()?;
            config.server = ServerConfig::Clustered {
                hosts,
                policy: ClusterDiscoveryPolicy::default(),
            };
            config
        }
        Deployment::Sentinel(sentinel) => {
            let mut config = match &sentinel.userinfo {
                // fred parses (and percent-decodes) credentials only as part of a URL.
                Some(userinfo) => single(&format!("redis://{userinfo}@127.0.0.1:1"))?,
                None => Config::default(),
            };
            let hosts = sentinel
                .sentinels
                .iter()
                .map(|url| single(url).map(|node| node.server.hosts()[0].clone()))
                .collect::<Result<Vec<Server>, Error>>()?;
            // The URL's credentials are the master's; the Sentinels are reached without.
            config.server = ServerConfig::Sentinel {
                hosts,
                service_name: sentinel.master,
                username: None,
                password: None,
            };
            config
        }
        _ => {
            return Err(Error::invalid_config(
                "this URL form is not supported by the fred adapter",
                None,
            ));
        }
    };
    apply_tls(&mut config, url, tls)?;
    Ok(config)
}

/// One server's URL, checked by fred.
fn single(url: &str) -> Result<Config, Error> {
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    if !matches!(scheme.as_deref(), Some("redis" | "rediss")) {
        return Err(url::unusable("the fred adapter takes no Unix socket"));
    }
    Config::from_url_centralized(url)
        .map_err(|err| Error::invalid_config("invalid Redis URL", Some(err.into())))
}

/// `rediss` schemes need the `tls` feature; a given root certificate replaces the
/// system's roots.
#[cfg(feature = "tls")]
fn apply_tls(config: &mut Config, url: &str, tls: &Tls) -> Result<(), Error> {
    if !uses_tls(url) {
        return Ok(());
    }
    if let Some(pem) = tls.root_certificate() {
        config.tls = Some(crate::tls::connector(pem)?.into());
    }
    Ok(())
}

#[cfg(not(feature = "tls"))]
fn apply_tls(config: &mut Config, url: &str, tls: &Tls) -> Result<(), Error> {
    let _ = (config, tls);
    if uses_tls(url) {
        return Err(url::tls_left_out("lock-fred"));
    }
    Ok(())
}

fn uses_tls(url: &str) -> bool {
    url.get(..6)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss"))
}

/// Reconnects for ever, backing off from 20 ms to 1 s.
pub(crate) fn reconnect_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, RECONNECT.0, RECONNECT.1, 2)
}

/// A builder for `config` with the connector's timeouts: commands are never re-sent
/// after a broken connection (a lock script must run at most once per call), and a
/// silent connection is replaced after the response timeout.
pub(crate) fn builder(config: Config, timeouts: Timeouts) -> Builder {
    let mut builder = Builder::from_config(config);
    builder.set_policy(ReconnectPolicy::new_exponential(
        0,
        RECONNECT.0,
        RECONNECT.1,
        2,
    ));
    builder.set_connection_config(ConnectionConfig {
        connection_timeout: timeouts.connect,
        internal_command_timeout: timeouts.response,
        max_command_attempts: 1,
        // Lock calls are small and latency-bound: without this, a command written right
        // after another can sit out a delayed ACK (about 40 ms on Linux).
        tcp: TcpConfig {
            nodelay: Some(true),
            ..TcpConfig::default()
        },
        unresponsive: UnresponsiveConfig {
            max_timeout: Some(timeouts.response),
            interval: (timeouts.response / 3).max(Duration::from_millis(10)),
        },
        ..ConnectionConfig::default()
    });
    builder.set_performance_config(PerformanceConfig {
        default_command_timeout: timeouts.response,
        ..PerformanceConfig::default()
    });
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> Config {
        from_url(url, &Tls::default()).unwrap_or_else(|err| panic!("{url}: {err}"))
    }

    #[test]
    fn every_url_form_maps_to_fred() {
        let single = config("redis://u:p@127.0.0.1:7000/2");
        assert_eq!(
            single.server,
            ServerConfig::new_centralized("127.0.0.1", 7000)
        );
        assert_eq!(single.password.as_deref(), Some("p"));
        assert_eq!(single.database, Some(2));

        let cluster = config("redis+cluster://u:p@a:7000,b:7001");
        assert_eq!(
            cluster.server,
            ServerConfig::new_clustered(vec![("a", 7000), ("b", 7001)])
        );
        assert_eq!(cluster.username.as_deref(), Some("u"));

        let sentinel = config("redis+sentinel://u:p%40ss@a:26379,b:26380/locks");
        assert_eq!(
            sentinel.server,
            ServerConfig::new_sentinel(vec![("a", 26379), ("b", 26380)], "locks")
        );
        assert_eq!(sentinel.password.as_deref(), Some("p@ss"));
    }
}
