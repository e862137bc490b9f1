//! The conformance suite and the Redis fault scenarios on a three-master Redis Cluster,
//! through the redis-crate adapter.

mod common;

use common::adapter;
use lock_conformance::redis_fixture::RedisFixture;

lock_conformance::conformance_suite!(
    RedisFixture::cluster(adapter::<lock_redis::Connector>()),
    without[Failover]
);
