//! The conformance suite and the Redis fault scenarios on a standalone server, through
//! the fred adapter.

use lock_conformance::redis_fixture::RedisFixture;
use lock_conformance::redis_fixture::through;

lock_conformance::conformance_suite!(
    RedisFixture::standalone(through::<lock_fred::Connector>()),
    without[Failover]
);
