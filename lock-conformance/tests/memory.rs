//! The conformance suite on the in-memory backend.

lock_conformance::conformance_tests!(lock_conformance::fixture::MemoryFixture::start());
lock_conformance::fair_tests!(lock_conformance::fixture::MemoryFixture::start());
