//! The conformance suite and the Redis fault scenarios on a standalone server, through
//! the redis-crate adapter.

mod common;

use common::redis_adapter;
use lock_conformance::redis_fixture::RedisFixture;

lock_conformance::conformance_suite!(RedisFixture::standalone(redis_adapter()), without[Failover]);
