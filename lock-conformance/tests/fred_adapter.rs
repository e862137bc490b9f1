//! The adapter suite (connecting, bad input, ACL, replica acknowledgement, TLS) for the
//! fred adapter.

mod common;

lock_conformance::adapter_tests!(common::fred_connector());
