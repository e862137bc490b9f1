//! The conformance suite, the Redis fault scenarios and failover on a Sentinel
//! deployment (master, replica, three Sentinels), through the fred adapter.

mod common;

use common::adapter;
use lock_conformance::redis_fixture::RedisFixture;

lock_conformance::conformance_suite!(RedisFixture::sentinel(adapter::<lock_fred::Connector>()));
