//! A waiter whose next request the server refuses: the tests of a hand-over's message
//! use it to show that the waiter holds without asking again.

use std::time::Duration;

use lock_core::{Guard, Locks};
use lock_postgres::schema::{self, SchemaName};
use lock_testkit::PostgresServer;
use tokio::time::{sleep, timeout};
use tokio_postgres::Client;

/// Creates `role`, a service role with the documented grants (the tables made already),
/// and returns a URL that connects as it.
pub(crate) async fn service_role(server: &PostgresServer, probe: &Client, role: &str) -> String {
    let grants = schema::grants_sql(&SchemaName::default(), role).unwrap();
    probe
        .batch_execute(&format!("CREATE ROLE {role} LOGIN;\n{grants}"))
        .await
        .unwrap();
    format!("postgres://{role}@127.0.0.1:{}/postgres", server.port())
}

/// `holder` takes `name`, `waiter` (a client of `role`) waits for it, `role` loses the
/// right to call the functions once the waiter waits ([`refuse_once_waiting`]), and
/// `holder` releases: returns the waiter's guard, which it got without asking again.
pub(crate) async fn hand_to_a_refused_waiter(
    (holder, waiter): (&Locks, &Locks),
    probe: &Client,
    name: &str,
    role: &str,
) -> Guard {
    let held = holder.mutex(name).lock().await.unwrap();
    let waits = tokio::spawn({
        let lock = waiter.mutex(name);
        async move { lock.lock().await }
    });
    refuse_once_waiting(probe, name, role).await;
    held.unlock().await.unwrap();
    timeout(Duration::from_secs(5), waits)
        .await
        .expect("the waiter holds from the message")
        .unwrap()
        .expect("the waiter asked the server, which refused it")
}

/// Waits until `role`'s waiter for `name` asked twice (its second attempt is made once it
/// listens, so a release from now on reaches it) and its sessions are idle (that answer
/// is on its way back; its next attempt is seconds away), then takes from `role` the
/// right to call the functions: whatever it sends next is refused.
async fn refuse_once_waiting(probe: &Client, name: &str, role: &str) {
    let waiting = async {
        loop {
            let row = probe
                .query_one(
                    "SELECT (SELECT coalesce(max(attempt), 0) FROM distlock.waiters
                              WHERE name = $1),
                            (SELECT count(*) FROM pg_stat_activity
                              WHERE usename = $2 AND state <> 'idle')",
                    &[&name, &role],
                )
                .await
                .unwrap();
            let (attempt, busy): (i32, i64) = (row.get(0), row.get(1));
            if attempt >= 2 && busy == 0 {
                return;
            }
            sleep(Duration::from_millis(5)).await;
        }
    };
    timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter asked twice");
    probe
        .batch_execute(&format!(
            "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA distlock FROM {role}"
        ))
        .await
        .unwrap();
}
