//! The conformance suite, the Redis fault scenarios and failover on a Sentinel
//! deployment (master, replica, three Sentinels), through the fred adapter.

use lock_conformance::redis_fixture::RedisFixture;
use lock_conformance::redis_fixture::through;

lock_conformance::conformance_suite!(RedisFixture::sentinel(through::<lock_fred::Connector>()));
