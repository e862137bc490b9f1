//! How the Redis fixtures connect through each adapter, shared by the standalone,
//! cluster and Sentinel test files of both.

use std::sync::Arc;

use lock_conformance::adapter::{AdapterConnect, ConnectSpec};
use lock_conformance::redis_fixture::Connect;
use lock_core::Backend;
use lock_redis_protocol::{ConnectorSettings, ProtocolOptions};

/// Connects to the fixture's URLs: a cluster from all of them, anything else (a single
/// server, a `redis+sentinel://` URL) from the first.
#[allow(dead_code)] // reason: each test file uses one of the two adapters.
pub(crate) fn redis_adapter() -> Connect {
    Arc::new(
        |urls: Vec<String>, cluster: bool, options: ProtocolOptions| {
            Box::pin(async move {
                let connector = if cluster {
                    lock_redis::Connector::cluster(urls)
                } else {
                    lock_redis::Connector::new(urls[0].clone())
                };
                let settings = ConnectorSettings::default().protocol(options);
                let backend = connector.settings(settings).connect().await?;
                Ok(Arc::new(backend) as Arc<dyn Backend>)
            })
        },
    )
}

/// Connects like [`redis_adapter`], through the fred adapter.
#[allow(dead_code)] // reason: each test file uses one of the two adapters.
pub(crate) fn fred_adapter() -> Connect {
    Arc::new(
        |urls: Vec<String>, cluster: bool, options: ProtocolOptions| {
            Box::pin(async move {
                let url = if cluster {
                    cluster_url(&urls)
                } else {
                    urls[0].clone()
                };
                let backend = lock_fred::Connector::new(url)
                    .settings(ConnectorSettings::default().protocol(options))
                    .connect()
                    .await?;
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

/// The redis-crate adapter as the adapter suite connects it.
#[allow(dead_code)] // reason: each test file uses one of the two adapters.
pub(crate) fn redis_connector() -> AdapterConnect {
    Arc::new(|spec: ConnectSpec| {
        Box::pin(async move {
            let mut connector =
                lock_redis::Connector::new(spec.url.clone()).settings(settings_of(&spec));
            if let Some(pem) = spec.root_certificate {
                connector = connector.root_certificate(pem);
            }
            Ok(Arc::new(connector.connect().await?) as Arc<dyn Backend>)
        })
    })
}

/// The fred adapter as the adapter suite connects it.
#[allow(dead_code)] // reason: each test file uses one of the two adapters.
pub(crate) fn fred_connector() -> AdapterConnect {
    Arc::new(|spec: ConnectSpec| {
        Box::pin(async move {
            let mut connector =
                lock_fred::Connector::new(spec.url.clone()).settings(settings_of(&spec));
            if let Some(pem) = spec.root_certificate {
                connector = connector.root_certificate(pem);
            }
            Ok(Arc::new(connector.connect().await?) as Arc<dyn Backend>)
        })
    })
}

/// The settings the adapter suite asks for.
#[allow(dead_code)] // reason: each test file uses one of the two adapters.
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
