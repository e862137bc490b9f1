//! The conformance suite, the Redis fault scenarios and failover on a Sentinel
//! deployment (master, replica, three Sentinels), through the redis-crate adapter.

mod common;

use common::redis_adapter;
use lock_conformance::redis_fixture::RedisFixture;

lock_conformance::conformance_suite!(RedisFixture::sentinel(redis_adapter()));
