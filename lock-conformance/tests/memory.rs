//! The conformance suite on the in-memory backend.

lock_conformance::conformance_suite!(
    lock_conformance::fixture::MemoryFixture::start(),
    without [Reservation, RedisControl, Failover]
);
