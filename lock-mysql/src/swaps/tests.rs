//! The queue of swaps, the statement on a real server, and a stale swap's outcome.

mod queue {
    use std::time::Duration;

    use tokio::time::Instant;

    use crate::store::Serving;
    use crate::swap::{Change, MOST_COMBINED};
    use crate::swaps::{Outcome, STALE, Swaps};

    fn change(key: &str, server: u32) -> Change {
        Change {
            key: key.as_bytes().to_vec(),
            before: vec![1],
            written: vec![2],
            held_until: 0,
            window: (0, 0),
            serving: Serving {
                server,
                quarantine_until: 0,
            },
        }
    }

    fn keys(swaps: &[crate::swaps::Queued]) -> Vec<String> {
        swaps
            .iter()
            .map(|queued| String::from_utf8_lossy(&queued.change.key).into_owned())
            .collect()
    }

    /// A statement takes swaps under one serving, on distinct rows, at most
    /// `MOST_COMBINED`, and leaves the rest queued in order. Fails if two servings or
    /// one row twice could share a statement.
    #[test]
    fn a_statement_takes_one_servings_distinct_rows() {
        let swaps = Swaps::default();
        let mut waiting = Vec::new();
        for (key, server) in [("a", 1), ("b", 2), ("a", 1), ("c", 1)] {
            waiting.push(swaps.push(change(key, server), "test", false).1);
        }
        assert_eq!(keys(&swaps.next_statement()), ["a", "c"]);
        assert_eq!(keys(&swaps.next_statement()), ["b"]);
        assert_eq!(keys(&swaps.next_statement()), ["a"]);
        assert!(swaps.next_statement().is_empty());
        for n in 0..=MOST_COMBINED {
            waiting.push(swaps.push(change(&n.to_string(), 1), "test", false).1);
        }
        assert_eq!(swaps.next_statement().len(), MOST_COMBINED);
        assert_eq!(swaps.next_statement().len(), 1);
    }

    /// A swap whose caller went away is not sent; one that waited past `STALE` takes
    /// its transaction; a withdrawn one is gone, and only once.
    #[test]
    fn gone_stale_and_withdrawn_swaps_are_not_sent() {
        let swaps = Swaps::default();
        let (_, gone) = swaps.push(change("gone", 1), "test", false);
        drop(gone);
        let (_, mut stale) = swaps.push(change("stale", 1), "test", false);
        if let Some(queued) = swaps.lock().back_mut() {
            queued.since = Instant::now()
                .checked_sub(STALE * 2)
                .expect("a clock past STALE");
        }
        let (withdrawn, _kept) = swaps.push(change("withdrawn", 1), "test", false);
        let (_, _fresh) = swaps.push(change("fresh", 1), "test", false);
        assert!(swaps.withdraw(withdrawn));
        assert!(!swaps.withdraw(withdrawn));
        assert_eq!(keys(&swaps.next_statement()), ["fresh"]);
        assert!(matches!(stale.try_recv(), Ok(Outcome::Stale(change)) if change.key == b"stale"));
    }

    /// One slow statement among quick ones does not stop the queueing; a run of them
    /// does, and a run of quick ones resumes it.
    #[test]
    fn slowness_is_a_moving_average() {
        let swaps = Swaps::default();
        let (quick, slow) = (Duration::from_millis(1), Duration::from_millis(40));
        swaps.took(slow);
        assert!(!swaps.slow(), "one slow statement");
        for _ in 0..4 {
            swaps.took(slow);
        }
        assert!(swaps.slow(), "five slow statements");
        for _ in 0..16 {
            swaps.took(quick);
        }
        assert!(!swaps.slow(), "quick again");
    }
}

/// A stale swap's outcome as its caller sees it.
mod stale {
    use std::time::Duration;

    use lock_core::backend::LockKind;
    use lock_core::backend::machine::new_machine;
    use tokio::time::Instant;

    use crate::state::State;
    use crate::store::Serving;
    use crate::swap::{Change, Sighting};
    use crate::swaps::{Outcome, Swapped, finish};

    /// A swap that went stale comes back as the row it was stepped on, decoded from the
    /// bytes it would have replaced, with the clock reading it was placed by: stepping
    /// the operation again on it is what a transaction reading that row would do.
    #[test]
    fn a_stale_swap_comes_back_as_its_row() {
        let clock = 1_000_000_000;
        let machine = new_machine(
            LockKind::Mutex,
            None,
            Duration::from_secs(60),
            (clock, clock, 0),
        );
        let before = State::new(machine).encode();
        let serving = Serving {
            server: 7,
            quarantine_until: 0,
        };
        let after = Sighting {
            stored: vec![1],
            state: State::decode(&before).expect("a row"),
            serving,
            clock,
            at: Instant::now(),
        };
        let change = Change {
            key: b"name".to_vec(),
            before: before.clone(),
            written: vec![1],
            held_until: 0,
            window: (clock, clock),
            serving,
        };
        let Ok(Swapped::Stale(row)) = finish(Outcome::Stale(change), ((), after), None) else {
            panic!("not stale");
        };
        assert_eq!(row.stored, before);
        assert_eq!(row.state.encode(), before);
        assert_eq!((row.clock, row.serving), (clock, serving));
    }
}

/// The statement on a real server, whose global `sql_mode` is lax: the connection's own
/// strict mode is what rolls a failed row's statement back.
mod on_a_server {
    // reason: a test reports failures by panicking.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use lock_testkit::MariaDbServer;
    use mysql_async::Opts;
    use mysql_async::prelude::Queryable;
    use tokio::sync::oneshot;

    use crate::pool::{Manager, Pool};
    use crate::schema::Tables;
    use crate::store::Serving;
    use crate::swap::{Change, Logging, Statement};
    use crate::swaps::{Outcome, Swaps, send_statement};

    fn change(key: &str, before: &[u8], written: &[u8], serving: Serving) -> Change {
        Change {
            key: key.as_bytes().to_vec(),
            before: before.to_vec(),
            written: written.to_vec(),
            held_until: 0,
            window: (0, u64::MAX),
            serving,
        }
    }

    /// Sends `changes` as one statement and answers what became of each.
    async fn send(pool: &Pool, statement: &Statement, changes: Vec<Change>) -> Vec<Outcome> {
        let swaps = Swaps::default();
        let answered: Vec<oneshot::Receiver<Outcome>> = changes
            .into_iter()
            .map(|change| swaps.push(change, "test", false).1)
            .collect();
        let queued = swaps.next_statement();
        assert_eq!(queued.len(), answered.len(), "one statement");
        let conn = pool.get().await.unwrap();
        assert!(
            send_statement(conn, queued, (&swaps, statement), Duration::from_secs(5))
                .await
                .is_some()
        );
        let mut outcomes = Vec::new();
        for outcome in answered {
            outcomes.push(outcome.await.unwrap());
        }
        outcomes
    }

    fn states(server: &MariaDbServer) -> String {
        server.sql("SELECT lock_key, HEX(state) FROM distlock_names ORDER BY lock_key")
    }

    /// Would fail if a statement with a failed row kept its other rows' changes (as a
    /// lax `sql_mode` does, storing an empty state), or if one serving another server
    /// changed anything.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_combined_statement_applies_to_all_its_rows_or_none() {
        let server = MariaDbServer::start().await;
        let said = server.sql("SET GLOBAL sql_mode = ''");
        assert!(said.trim().is_empty(), "{said}");
        let manager = Manager::new(
            (Opts::from_url(&server.url()).unwrap(), false),
            Duration::from_secs(5),
            Duration::from_secs(5),
        );
        let pool = Pool::builder(manager).max_size(1).build().unwrap();
        let tables = Tables::default();
        {
            let mut conn = pool.get().await.unwrap();
            conn.query_drop(tables.create_sql()).await.unwrap();
            conn.query_drop(
                "INSERT INTO distlock_names (lock_key, name, state) \
                 VALUES ('k1', 'k1', x'A1'), ('k2', 'k2', x'A2')",
            )
            .await
            .unwrap();
        }
        let statement = Statement::new(&tables, Logging::Rows);
        let serving = Serving {
            server: server.sql("SELECT @@server_id").trim().parse().unwrap(),
            quarantine_until: 0,
        };

        let one_row_moved = vec![
            change("k1", &[0xA1], &[0xB1], serving),
            change("k2", &[0xEE], &[0xB2], serving),
        ];
        let outcomes = send(&pool, &statement, one_row_moved).await;
        assert!(
            outcomes.iter().all(|o| matches!(o, Outcome::NotApplied)),
            "{outcomes:?}"
        );
        assert_eq!(states(&server), "k1\tA1\nk2\tA2\n");

        let elsewhere = Serving {
            server: serving.server + 1,
            ..serving
        };
        let another_server = vec![
            change("k1", &[0xA1], &[0xB1], elsewhere),
            change("k2", &[0xA2], &[0xB2], elsewhere),
        ];
        let outcomes = send(&pool, &statement, another_server).await;
        assert!(
            outcomes.iter().all(|o| matches!(o, Outcome::NotApplied)),
            "{outcomes:?}"
        );
        assert_eq!(states(&server), "k1\tA1\nk2\tA2\n");

        let both = vec![
            change("k1", &[0xA1], &[0xB1], serving),
            change("k2", &[0xA2], &[0xB2], serving),
        ];
        let outcomes = send(&pool, &statement, both).await;
        assert!(
            outcomes.iter().all(|o| matches!(o, Outcome::Applied)),
            "{outcomes:?}"
        );
        assert_eq!(states(&server), "k1\tB1\nk2\tB2\n");

        let a_row_deleted = vec![
            change("k1", &[0xB1], &[0xC1], serving),
            change("gone", &[0xB3], &[0xC3], serving),
        ];
        let outcomes = send(&pool, &statement, a_row_deleted).await;
        assert!(
            outcomes.iter().all(|o| matches!(o, Outcome::Failed(_))),
            "in doubt: {outcomes:?}"
        );
    }
}
