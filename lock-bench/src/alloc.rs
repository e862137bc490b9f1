//! Heap bytes counted exactly: the bench runs on a counting wrapper of the system
//! allocator, so memory figures are bytes the program holds, not resident pages the
//! allocator happens to keep.
//!
//! Every allocation pays for two atomic additions; every contender in the run pays the
//! same, so the ratios between them stand.

use std::alloc::System;

use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

#[global_allocator]
static COUNTING: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes allocated and not yet freed, over the whole process.
pub(crate) fn live_bytes() -> f64 {
    let stats = COUNTING.stats();
    stats.bytes_allocated as f64 - stats.bytes_deallocated as f64
}

/// Allocations made so far, over the whole process.
pub(crate) fn allocations() -> f64 {
    COUNTING.stats().allocations as f64
}
