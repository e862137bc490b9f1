//! The conformance suite, the Redis fault scenarios and failover on a Sentinel
//! deployment (master, replica, three Sentinels), through the fred adapter.

mod common;

use common::fred_adapter;
use lock_conformance::redis_fixture::RedisFixture;

lock_conformance::conformance_tests!(RedisFixture::sentinel(fred_adapter()));
lock_conformance::fair_tests!(RedisFixture::sentinel(fred_adapter()));
lock_conformance::redis_fault_tests!(RedisFixture::sentinel(fred_adapter()));
lock_conformance::sentinel_tests!(RedisFixture::sentinel(fred_adapter()));
