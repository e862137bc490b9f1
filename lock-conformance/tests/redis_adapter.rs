//! The adapter suite (connecting, bad input, ACL, replica acknowledgement, TLS) for the
//! redis-crate adapter.

mod common;

lock_conformance::adapter_tests!(common::redis_connector());
