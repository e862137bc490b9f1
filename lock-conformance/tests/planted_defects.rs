//! A check never seen to fail proves little: defects of the past planted back in a
//! store's server-side code, a Lua script and a SQL function, each on a server of its
//! own, and the differential test (`first_disagreement`) must catch each. The defect
//! planted is the third review's R2: a cancellation that leaves no end, so that a late
//! copy of a cancelled acquisition's attempt takes the lock for nobody.
//!
//! This file holds only these tests: a script's planted source is its source for the
//! whole test process.

use std::sync::Arc;

use async_trait::async_trait;
use lock_conformance::Fixture;
use lock_conformance::redis_fixture::RedisFixture;
use lock_conformance::redis_fixture::through;
use lock_conformance::scenarios::first_disagreement;
use lock_core::{Backend, LockKind};
use lock_postgres::Connector;
use lock_testkit::PostgresServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_differential_test_catches_a_defect_planted_in_a_lua_script() {
    // The ended latch is set only for an acquisition that was granted or handed the
    // lock: a cancelled one that never was leaves nothing behind.
    lock_redis_protocol::script::MUTEX_CANCEL
        .plant_defect(
            "redis.call('set', latch, 'r-1', 'px', latch_ms)",
            "if before then redis.call('set', latch, 'r-1', 'px', latch_ms) end",
        )
        .expect("the defect is planted");
    let fixture = RedisFixture::standalone(through::<lock_redis::Connector>()).await;
    let caught = first_disagreement(&fixture, LockKind::Mutex).await;
    let caught = caught.expect("the differential test catches the planted defect");
    println!("caught: {caught}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_differential_test_catches_a_defect_planted_in_a_sql_function() {
    let fixture = PlantedPostgres::start().await;
    // Connecting migrates; the defect is planted after, in the function as installed.
    drop(fixture.backend().await);
    let admin = lock_testkit::postgres_client(&fixture.server.url()).await;
    let row = admin
        .query_one(
            "SELECT pg_catalog.pg_get_functiondef(\
             'distlock.cancel_acquisition(text, text, uuid)'::pg_catalog.regprocedure)",
            &[],
        )
        .await
        .expect("the function is installed");
    let definition: String = row.get(0);
    let planted: String = definition
        .lines()
        .filter(|line| !line.contains("end_acquisitions(p_name, ARRAY[p_request]"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(
        planted, definition,
        "the cancellation ends its acquisition today"
    );
    admin
        .batch_execute(&planted)
        .await
        .expect("the defect is planted");
    let caught = first_disagreement(&fixture, LockKind::Mutex).await;
    let caught = caught.expect("the differential test catches the planted defect");
    println!("caught: {caught}");
}

/// A PostgreSQL server of the test's own, reached directly as the tables' owner.
struct PlantedPostgres {
    server: PostgresServer,
}

impl PlantedPostgres {
    async fn start() -> Self {
        Self {
            server: PostgresServer::start().await,
        }
    }
}

#[async_trait]
impl Fixture for PlantedPostgres {
    async fn backend(&self) -> Arc<dyn Backend> {
        let backend = Connector::new(self.server.url())
            .pool_size(2)
            .connect()
            .await
            .unwrap_or_else(|err| panic!("connecting: {err}"));
        Arc::new(backend)
    }

    fn consecutive_tokens(&self) -> bool {
        false
    }

    fn fair_mutex(&self) -> bool {
        true
    }

    async fn subscribed_channels(&self) -> Vec<String> {
        Vec::new()
    }
}
