//! How the Redis fixtures and the adapter suite connect through each adapter, written
//! once over the connectors' common shape ([`Connect`]).

#![allow(
    dead_code,
    reason = "each test file uses the fixtures or the adapter suite, not both"
)]

use std::sync::Arc;

use lock_conformance::adapter::{AdapterConnect, ConnectSpec};
use lock_conformance::redis_fixture::Connect as FixtureConnect;
use lock_core::{Backend, Connect};
use lock_redis_protocol::{ConnectorSettings, ProtocolOptions};

/// What the adapter suite needs beyond [`Connect`]: a root certificate to trust.
pub(crate) trait RootCertificate {
    fn root_certificate(self, pem: Vec<u8>) -> Self;
}

impl RootCertificate for lock_redis::Connector {
    fn root_certificate(self, pem: Vec<u8>) -> Self {
        self.root_certificate(pem)
    }
}

impl RootCertificate for lock_fred::Connector {
    fn root_certificate(self, pem: Vec<u8>) -> Self {
        self.root_certificate(pem)
    }
}

/// A Redis adapter's connector.
pub(crate) trait RedisConnector:
    Connect<Settings = ConnectorSettings> + RootCertificate
{
}

impl<C: Connect<Settings = ConnectorSettings> + RootCertificate> RedisConnector for C {}

/// Connects `C` to the fixture's URLs: a cluster from all of them, anything else (a
/// single server, a `redis+sentinel://` URL) from the first.
pub(crate) fn adapter<C: RedisConnector>() -> FixtureConnect {
    Arc::new(
        |urls: Vec<String>, cluster: bool, options: ProtocolOptions| {
            Box::pin(async move {
                let url = if cluster {
                    cluster_url(&urls)
                } else {
                    urls[0].clone()
                };
                let settings = ConnectorSettings::default().protocol(options);
                let backend = C::new(url).settings(settings).connect().await?;
                Ok(Arc::new(backend) as Arc<dyn Backend>)
            })
        },
    )
}

/// `redis://h:p` URLs as one `redis+cluster://h:p,h:p` URL.
fn cluster_url(urls: &[String]) -> String {
    let hosts: Vec<&str> = urls
        .iter()
        .map(|url| url.trim_start_matches("redis://").trim_end_matches('/'))
        .collect();
    format!("redis+cluster://{}", hosts.join(","))
}

/// `C` as the adapter suite connects it.
pub(crate) fn connector<C: RedisConnector>() -> AdapterConnect {
    Arc::new(|spec: ConnectSpec| {
        Box::pin(async move {
            let mut connector = C::new(spec.url.clone()).settings(settings_of(&spec));
            if let Some(pem) = spec.root_certificate {
                connector = connector.root_certificate(pem);
            }
            Ok(Arc::new(connector.connect().await?) as Arc<dyn Backend>)
        })
    })
}

/// The settings the adapter suite asks for.
fn settings_of(spec: &ConnectSpec) -> ConnectorSettings {
    let mut settings = ConnectorSettings::default().connect_timeout(spec.connect_timeout);
    if let Some(timeout) = spec.response_timeout {
        settings = settings.response_timeout(timeout);
    }
    if let Some(quarantine) = spec.restart_quarantine {
        settings = settings.restart_quarantine(quarantine);
    }
    match spec.replica_ack {
        Some((replicas, timeout)) => settings.replica_ack(replicas, timeout),
        None => settings,
    }
}
