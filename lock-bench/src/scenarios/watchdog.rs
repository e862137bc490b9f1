//! Many locks kept by the watchdog: renewal scripts per round and the CPU they cost.

use std::time::Duration;

use distlock::Locks;
use lock_testkit::RedisServer;
use tokio::time::{Instant, sleep};

use super::measure::{cpu_seconds, script_calls};
use super::{Results, Scale, figures};
use crate::renewals;

/// Script calls the server has run and renewals the watchdog has reported, at one moment.
struct RenewalCounts {
    script_calls: u64,
    renewals: renewals::Renewals,
}

/// Both counts, read right after a watchdog round reported its renewals. A round reports
/// once all its calls were answered, and the next one starts an interval (1 s) later, so
/// the server's count then holds every call of the rounds reported and no other. (Reading
/// them in a moment of 50 ms without change could catch a round whose calls had all run
/// but whose client had not reported yet.)
async fn renewal_counts_after_a_round(server: &RedisServer) -> RenewalCounts {
    let reported = || renewals::so_far().expect("the bench installs no other recorder");
    let start = reported();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = reported();
        if now != start {
            return RenewalCounts {
                script_calls: script_calls(server).await,
                renewals: now,
            };
        }
        assert!(
            Instant::now() < deadline,
            "the watchdog reported no round in 5 s"
        );
        sleep(Duration::from_millis(1)).await;
    }
}

/// One client holds many locks with a 3 s lease for 12 s.
pub(crate) async fn watchdog(server: &RedisServer, scale: Scale) -> Results {
    let lease = Duration::from_secs(3);
    let locks = Locks::builder(
        distlock::redis::connect_backend(&server.url())
            .await
            .expect("connect"),
    )
    .watchdog_lease(lease)
    .build()
    .expect("settings");
    let mut guards = Vec::with_capacity(scale.watchdog_locks);
    for i in 0..scale.watchdog_locks {
        guards.push(
            locks
                .mutex(&format!("bench:w:{i}"))
                .lock()
                .await
                .expect("lock"),
        );
    }
    let before = renewal_counts_after_a_round(server).await;
    let cpu_before = cpu_seconds();
    sleep(Duration::from_secs(scale.watchdog_seconds)).await;
    let after = renewal_counts_after_a_round(server).await;
    let cpu = cpu_seconds() - cpu_before;
    let calls = (after.script_calls - before.script_calls) as f64;
    // Each renewal is one lock renewed in one round.
    let renewed = after.renewals.renewed - before.renewals.renewed;
    let failed = after.renewals.failed - before.renewals.failed;
    let rounds = renewed as f64 / scale.watchdog_locks as f64;
    let still_valid = guards.iter().filter(|g| g.is_held()).count();
    let on_server: i64 = server.command(&["DBSIZE"]).await;
    let all_held =
        still_valid == scale.watchdog_locks && on_server as usize >= scale.watchdog_locks;
    for guard in guards {
        let _ = guard.unlock().await;
    }
    let per_100 = calls / rounds / (scale.watchdog_locks as f64 / 100.0);
    let mut results = Results::new();
    results.insert(
        "lock (redis)".into(),
        figures(&[
            ("locks", scale.watchdog_locks as f64),
            ("rounds", rounds),
            ("script_calls_per_round", calls / rounds),
            ("script_calls_per_100_locks_per_round", per_100),
            ("failed_renewals", failed as f64),
            ("client_cpu_seconds", cpu),
            ("all_held", if all_held { 1.0 } else { 0.0 }),
        ]),
    );
    results
}
