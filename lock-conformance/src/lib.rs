//! The conformance suite: one set of lock scenarios, run against every backend and
//! topology through a [`Fixture`].
//!
//! A fixture knows how to make new backend connections to one shared store (the memory
//! backend, a standalone Redis, a Redis Cluster, ...) and, for Redis, how to inject faults
//! through [`RedisControl`]. The macros [`conformance_tests!`] and [`redis_fault_tests!`]
//! expand to one `#[tokio::test]` per scenario for a fixture, so each test file of the
//! matrix is a few lines and no scenario is ever copied.

// This crate is a test suite: a panic is how a scenario reports a failure.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

pub mod adapter;
mod family;
pub mod faulty;
pub mod fixture;
pub mod redis_fixture;
mod safety;
pub mod scenarios;

pub use fixture::{Fixture, RedisControl};

/// Expands to one test per backend-agnostic scenario, for the fixture built by `$make`
/// (an async expression yielding something that implements [`Fixture`]).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::__scenario_tests!($make;
            hold_count_goes_up_and_down,
            same_holder_reenters,
            acquisitions_outside_a_scope_do_not_reenter,
            holders_exclude_each_other,
            clients_exclude_each_other,
            non_holder_cannot_release,
            expired_lease_is_not_held,
            watchdog_keeps_the_lock,
            dropped_guard_is_released,
            try_lock_for_gives_up_after_its_wait,
            waiter_wakes_on_release,
            join_of_two_scopes_excludes,
            counter_under_lock_is_exact,
            channels_are_unsubscribed_after_waiters_leave,
            cancelled_acquires_leave_no_hold,
            force_unlock_frees_and_marks_lost,
            bad_arguments_are_typed_errors,
            read_write_compatibility,
            writer_downgrades_to_reader,
            read_hold_expiry_lets_a_writer_in,
            write_release_wakes_all_readers,
            watchdog_renews_every_kind,
            force_unlock_of_every_kind,
            fencing_tokens_strictly_increase,
            family_bad_input_is_typed,
            read_holds_released_out_of_order,
            expired_read_hold_leaves_no_count,
            a_grant_after_a_lost_hold_leaves_nothing_held,
            watchdog_renews_a_hold_taken_between_rounds,
            replies_of_one_holder_in_any_order,
            a_lost_reply_is_retried_and_counted_once,
            an_unanswered_grant_is_undone,
            a_bounded_wait_ends_on_time_when_subscribing_is_slow,
            an_unconfirmed_subscription_is_tried_again,
            a_replayed_grant_keeps_its_exact_fencing_token,
        );
    };
}

/// Expands to one test per fair-lock scenario.
#[macro_export]
macro_rules! fair_tests {
    ($make:expr) => {
        $crate::__scenario_tests!($make;
            fair_order_is_arrival_order,
            fair_lock_serves_500_waiters,
            fair_dead_waiter_is_skipped_after_its_deadline,
            fair_waiter_that_gives_up_leaves_the_queue,
            fair_lock_is_renewed_fenced_and_force_unlocked,
            fair_waiter_cancelled_mid_attempt_leaves_no_place,
        );
    };
}

/// Expands to one test per Sentinel scenario, for a Sentinel fixture.
#[macro_export]
macro_rules! sentinel_tests {
    ($make:expr) => {
        $crate::__scenario_tests!($make;
            failover_never_leaves_two_holders,
            replica_ack_keeps_the_lock_across_a_failover,
        );
    };
}

/// Expands to one test per Redis fault scenario, for a fixture whose
/// [`Fixture::redis`] is `Some`.
#[macro_export]
macro_rules! redis_fault_tests {
    ($make:expr) => {
        $crate::__scenario_tests!($make;
            redisson_data_layout,
            waiters_wake_after_pubsub_connection_is_killed,
            lock_survives_script_flush,
            restart_while_held_is_reported_lost,
            wrong_type_is_a_typed_error,
            starving_waiter_goes_before_newcomers,
            restart_quarantine_keeps_holders_apart,
            a_redisson_reader_never_cuts_our_read_hold_short,
            our_fair_waiters_keep_their_place_when_redisson_moves_the_queue,
            a_redisson_waiter_keeps_the_fair_queue,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_tests {
    ($make:expr; $($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let fixture = $make.await;
                $crate::scenarios::$scenario(&fixture).await;
            }
        )*
    };
}
