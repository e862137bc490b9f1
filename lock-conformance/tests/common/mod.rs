//! How the Redis fixtures connect through the redis-crate adapter, shared by the
//! standalone, cluster and Sentinel test files.

use std::sync::Arc;

use lock_conformance::redis_fixture::Connect;
use lock_core::Backend;
use lock_core::redis::ProtocolOptions;

/// Connects to the fixture's URLs: a cluster from all of them, anything else (a single
/// server, a `redis+sentinel://` URL) from the first.
pub(crate) fn redis_adapter() -> Connect {
    Arc::new(
        |urls: Vec<String>, cluster: bool, options: ProtocolOptions| {
            Box::pin(async move {
                let connector = if cluster {
                    lock_redis::Connector::cluster(urls)
                } else {
                    lock_redis::Connector::new(urls[0].clone())
                };
                let backend = connector.protocol(options).connect().await?;
                Ok(Arc::new(backend) as Arc<dyn Backend>)
            })
        },
    )
}
