//! The background work of a client: the supervisor that runs it on a live runtime, the
//! watchdog that renews leases, and the watch that tells a dead runtime.

pub mod runtime;
pub(crate) mod supervisor;
pub(crate) mod watchdog;
