//! The conformance suite: one set of lock scenarios, run against every backend and
//! topology through a [`Fixture`].
//!
//! A fixture knows how to make new backend connections to one shared store (the memory
//! backend, a standalone Redis, a Redis Cluster, ...) and, for Redis, how to inject faults
//! through [`RedisControl`]. [`conformance_suite!`] expands to one `#[tokio::test]` per
//! scenario for a fixture; each scenario names what it needs ([`Need`]), and runs only
//! where the fixture's backend declares it in its capabilities (see [`selection`]). A
//! skipped scenario says why in its output, and the test `scenario_selection` prints the
//! whole table of a fixture (`cargo test --test memory scenario_selection -- --nocapture`).
//! Each test file of the matrix is one line, and no scenario is ever copied.

// This crate is a test suite: a panic is how a scenario reports a failure.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

pub mod adapter;
mod differential;
mod expirable;
mod fair;
mod family;
pub mod faulty;
pub mod fixture;
mod grant_rules;
mod grants;

mod introspection;
mod latch;
pub mod logs;
pub mod redis_fixture;
mod safety;
pub mod scenarios;
pub mod selection;
mod semaphore;
pub mod timing;
mod wakes;

pub use fixture::{Fixture, OnDemand, RedisControl, Tracked};
pub use selection::{Deployment, Need};

/// Expands to one test per scenario for the fixture built by `$make` (an async
/// expression yielding something that implements [`Fixture`]), each run when the
/// fixture provides what it needs, and a test `scenario_selection` that prints which
/// scenarios run and why the others are skipped.
///
/// `without [Need, ...]` lists what the fixture is expected not to provide; the
/// selection test fails when the fixture lacks anything else (a capability dropped by
/// mistake would otherwise skip its scenarios in silence) or provides something listed.
///
/// `on paused time` runs each test on a one-thread runtime whose clock stands still
/// until every task waits for it (tokio's `start_paused`): for a fixture with no real
/// server, whose leases, waits and sleeps are all on tokio's clock, the suite then
/// takes no wall time waiting and no result depends on the machine's load.
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!($make, without []);
    };
    ($make:expr, without [$($lacking:ident),* $(,)?]) => {
        $crate::conformance_suite!(@runtime
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)];
            $make, without [$($lacking),*]);
    };
    ($make:expr, without [$($lacking:ident),* $(,)?], on paused time) => {
        $crate::conformance_suite!(@runtime
            #[tokio::test(start_paused = true)];
            $make, without [$($lacking),*]);
    };
    (@runtime #[$runtime:meta]; $make:expr, without [$($lacking:ident),* $(,)?]) => {
        $crate::__scenario_tests!(#[$runtime] $make; [$($lacking),*];
            declared_capabilities_hold: [],
            hold_count_goes_up_and_down: [],
            same_holder_reenters: [],
            acquisitions_outside_a_scope_do_not_reenter: [],
            holders_exclude_each_other: [],
            clients_exclude_each_other: [],
            non_holder_cannot_release: [],
            expired_lease_is_not_held: [],
            watchdog_keeps_the_lock: [],
            an_acquisition_renews_for_its_own_watchdog_lease: [],
            dropped_guard_is_released: [],
            try_lock_for_gives_up_after_its_wait: [],
            a_zero_wait_try_waits_for_its_slow_answer: [],
            an_acquisition_reports_its_timeout_and_keeps_its_lease: [],
            waiter_wakes_on_release: [],
            one_client_asks_once_for_its_mutex_waiters: [],
            a_clients_own_release_wakes_its_next_waiter: [],
            a_clients_next_waiter_asks_right_behind_its_release: [OrderedRequests],
            a_release_wakes_one_waiting_client: [WakesOneClient],
            a_vanished_clients_registration_does_not_swallow_a_release: [WakesOneClient, RedisControl],
            a_release_beside_another_librarys_waiter_offers_it_the_lock: [WakesOneClient, RedisControl],
            one_client_asks_once_for_its_writers: [ReadWrite],
            join_of_two_scopes_excludes: [],
            counter_under_lock_is_exact: [],
            channels_are_unsubscribed_after_waiters_leave: [],
            cancelled_acquires_leave_no_hold: [],
            force_unlock_frees_and_marks_lost: [],
            a_revoked_holder_learns_it_within_one_renewal_interval: [],
            a_revoked_holder_learns_it_though_its_owner_holds_again: [],
            who_holds_a_lock_is_told: [Introspection],
            a_hold_found_again_keeps_when_it_began: [Introspection],
            a_handed_hold_began_at_its_hand_over: [Introspection],
            a_redisson_peers_hold_is_described: [Introspection, RedisControl],
            bad_arguments_are_typed_errors: [],
            a_lease_too_short_for_its_round_trip_is_refused: [],
            watchdog_renews_a_hold_taken_between_rounds: [],
            a_grant_after_a_lost_hold_leaves_nothing_held: [],
            replies_of_one_holder_in_any_order: [],
            fair_and_plain_guards_of_one_holder_end_their_own_grants: [Fair],
            a_delayed_release_ends_only_its_own_grant: [],
            an_undo_never_ends_a_later_grant: [RetrySafe],
            an_undo_never_ends_a_later_read_grant: [ReadWrite, RetrySafe],
            a_lost_guard_beside_concurrent_grants_leaves_nothing_held: [],
            a_late_copy_of_a_released_grant_grants_nothing: [RetrySafe],
            a_release_of_an_unknown_grant_ends_nothing: [],
            a_hand_over_to_an_undone_id_gives_no_guard: [HandsOver, RetrySafe],
            a_revoked_handed_mutex_is_not_granted_again: [HandsOver],
            a_revoked_handed_fair_lock_is_not_granted_again: [HandsOver, Fair],
            a_revoked_handed_write_lock_is_not_granted_again: [HandsOver, ReadWrite],
            a_guard_of_a_revoked_handed_hold_learns_it_at_its_take_up: [HandsOver],
            a_late_copy_of_a_cancelled_mutex_acquisition_takes_nothing: [RetrySafe],
            a_late_copy_of_a_lapsed_grant_takes_nothing: [RetrySafe],
            a_late_copy_of_a_released_grant_takes_nothing: [RetrySafe],
            a_late_copy_of_a_refused_upgrade_takes_nothing: [RetrySafe, ReadWrite],
            a_late_copy_of_a_cancelled_fair_acquisition_takes_nothing: [RetrySafe, Fair],
            a_handed_hold_lasts_no_longer_than_its_waiters_lease: [HandsOver],
            a_store_keeps_the_grant_rules: [HandsOver, RetrySafe, Fencing, Introspection],
            a_store_keeps_the_grant_rules_of_the_fair_lock: [HandsOver, RetrySafe, Fencing, Introspection, Fair],
            a_store_keeps_the_grant_rules_of_the_read_write_lock: [WriterHandOver, RetrySafe, Fencing, Introspection, ReadWrite],
            a_bounded_wait_ends_on_time_when_subscribing_is_slow: [],
            a_bounded_wait_rides_out_an_outage_shorter_than_its_deadline: [],
            an_unconfirmed_subscription_is_tried_again: [],
            read_write_compatibility: [ReadWrite],
            writer_downgrades_to_reader: [ReadWrite],
            read_hold_expiry_lets_a_writer_in: [ReadWrite],
            write_release_wakes_all_readers: [ReadWrite],
            watchdog_renews_every_kind: [ReadWrite],
            force_unlock_of_every_kind: [ReadWrite],
            read_holds_released_out_of_order: [ReadWrite],
            expired_read_hold_leaves_no_count: [ReadWrite],
            an_expired_read_hold_does_not_outlive_its_owners_release: [ReadWrite],
            fencing_tokens_strictly_increase: [ReadWrite, Fencing],
            family_bad_input_is_typed: [Fair, ReadWrite],
            a_lost_reply_is_retried_and_counted_once: [RetrySafe],
            an_unanswered_grant_is_undone: [RetrySafe],
            a_grant_whose_caller_left_is_released: [RetrySafe],
            unlocks_in_flight_finish_before_shutdown_returns: [],
            a_replayed_grant_keeps_its_exact_fencing_token: [RetrySafe, Fencing],
            fair_order_is_arrival_order: [Fair],
            fair_lock_serves_500_waiters: [Fair],
            fair_dead_waiter_is_skipped_after_its_deadline: [Fair],
            fair_waiter_that_gives_up_leaves_the_queue: [Fair],
            fair_lock_is_renewed_fenced_and_force_unlocked: [Fair, Fencing],
            fair_waiter_cancelled_mid_attempt_leaves_no_place: [Fair],
            a_free_fair_lock_waits_for_its_first_waiter: [Fair],
            a_late_cancellation_keeps_a_later_acquisitions_place: [Fair],
            starving_waiter_goes_before_newcomers: [Reservation, RedisControl],
            redisson_data_layout: [RedisControl],
            a_lock_outside_any_scope_keeps_no_grants_hash: [RedisControl],
            waiters_wake_after_pubsub_connection_is_killed: [RedisControl],
            lock_survives_script_flush: [RedisControl],
            restart_while_held_is_reported_lost: [RedisControl],
            wrong_type_is_a_typed_error: [RedisControl, Fair, ReadWrite],
            restart_quarantine_keeps_holders_apart: [RedisControl],
            a_redisson_reader_never_cuts_our_read_hold_short: [RedisControl, ReadWrite],
            our_fair_waiters_keep_their_place_when_redisson_moves_the_queue: [RedisControl, Fair],
            a_redisson_waiter_keeps_the_fair_queue: [RedisControl, Fair],
            failover_never_leaves_two_holders: [Failover],
            replica_ack_keeps_the_lock_across_a_failover: [Failover],
            latch_opens_for_every_waiter: [CountDownLatch],
            latch_closes_again_and_deletes: [CountDownLatch],
            latch_bad_input_and_timeouts: [CountDownLatch],
            latch_count_down_sent_twice_counts_once: [CountDownLatch, RetrySafe],
            a_redisson_peer_shares_our_latch: [RedisControl, CountDownLatch],
            a_latch_named_with_a_hash_tag_opens: [CountDownLatch],
            a_semaphore_and_a_latch_never_share_a_name: [CountDownLatch, Semaphore],
            semaphore_bounds_concurrency: [Semaphore],
            semaphore_waiters_of_one_client_go_in_arrival_order: [Semaphore],
            semaphore_operations_and_bad_input: [Semaphore],
            a_wait_for_a_never_set_semaphore_says_why: [Semaphore],
            dropped_permits_and_abandoned_waits_keep_nothing: [Semaphore],
            a_storm_of_cancelled_acquisitions_loses_no_permit: [Semaphore],
            a_cancelled_starving_waiter_leaves_no_reservation: [Semaphore],
            a_permit_request_sent_twice_counts_once: [Semaphore, RetrySafe],
            a_starving_waiter_for_many_permits_holds_them_back: [Semaphore],
            a_waiter_for_more_permits_than_exist_starves_nobody: [Semaphore],
            permit_reservations_follow_their_rules: [Semaphore],
            a_starving_expirable_waiter_holds_permits_back: [ExpirableSemaphore],
            a_redisson_peer_shares_our_semaphore: [RedisControl, Semaphore],
            expirable_permits_bound_concurrency_while_renewed: [ExpirableSemaphore],
            a_cut_off_holders_permits_come_back_after_one_lease: [ExpirableSemaphore],
            a_late_renewal_never_cuts_a_lengthened_permit_lease: [ExpirableSemaphore],
            expirable_operations_and_bad_input: [ExpirableSemaphore],
            an_expirable_permit_request_sent_twice_counts_once: [ExpirableSemaphore, RetrySafe],
            expirable_and_plain_semaphores_share_one_count: [ExpirableSemaphore, Semaphore],
            a_redisson_peer_shares_our_expirable_semaphore: [RedisControl, ExpirableSemaphore],
            a_restart_issues_no_permit_an_old_holder_may_still_believe_in: [RedisControl, ExpirableSemaphore],
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_tests {
    (#[$runtime:meta] $make:expr; [$($lacking:ident),*]; $($scenario:ident : [$($need:ident),*]),* $(,)?) => {
        $(
            #[$runtime]
            async fn $scenario() {
                let fixture = $make.await;
                $crate::timing::set_scale($crate::Fixture::time_scale(&fixture));
                let needs: &[$crate::Need] = &[$($crate::Need::$need),*];
                match $crate::selection::skip_reason(&fixture, needs).await {
                    None => $crate::scenarios::$scenario(&fixture).await,
                    Some(reason) => println!("skipped {}: {reason}", stringify!($scenario)),
                }
            }
        )*

        /// Prints which scenarios this fixture runs and why it skips the others.
        #[$runtime]
        async fn scenario_selection() {
            let fixture = $make.await;
            let scenarios: &[(&str, &[$crate::Need])] =
                &[$((stringify!($scenario), &[$($crate::Need::$need),*])),*];
            let selection = $crate::selection::select(&fixture, scenarios).await;
            for line in &selection {
                println!("{line}");
            }
            let expected: &[$crate::Need] = &[$($crate::Need::$lacking),*];
            $crate::selection::assert_lacking(&fixture, scenarios, expected).await;
        }
    };
}
