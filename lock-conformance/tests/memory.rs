//! The conformance suite on the in-memory backend, on paused time: nothing but tokio's
//! clock is involved, so no test waits for real.

lock_conformance::conformance_suite!(
    lock_conformance::fixture::MemoryFixture::start(),
    without [Reservation, RedisControl, Failover],
    on paused time
);
