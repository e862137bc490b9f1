//! The conformance suite, the Redis fault scenarios and failover on a Sentinel
//! deployment (master, replica, three Sentinels), through the redis-crate adapter.

use lock_conformance::redis_fixture::{Connect, RedisFixture};

fn redis_adapter() -> Connect {
    std::sync::Arc::new(
        |urls: Vec<String>, _cluster: bool, options: lock_core::redis::ProtocolOptions| {
            Box::pin(async move {
                let backend = lock_redis::Connector::new(urls[0].clone())
                    .protocol(options)
                    .connect()
                    .await?;
                Ok(std::sync::Arc::new(backend) as std::sync::Arc<dyn lock_core::Backend>)
            })
        },
    )
}

lock_conformance::conformance_tests!(RedisFixture::sentinel(redis_adapter()));
lock_conformance::fair_tests!(RedisFixture::sentinel(redis_adapter()));
lock_conformance::redis_fault_tests!(RedisFixture::sentinel(redis_adapter()));
lock_conformance::sentinel_tests!(RedisFixture::sentinel(redis_adapter()));
