//! The facade's capability matrix (its crate documentation) says what each backend
//! declares: this test builds the table from the backends' own declarations and
//! compares it with the documentation, row by row.

#![cfg(all(
    feature = "redis",
    feature = "postgres",
    feature = "mysql",
    feature = "redlock"
))]

use std::sync::Arc;

use distlock::backend::Backend;
use distlock::memory::MemoryBackend;
use distlock::redlock::{LazyNode, MultiLock, RedLock};
use distlock::{Capabilities, Error, HoldModel};

/// A Redis node that is never connected: composites read its declared capabilities.
fn redis_node(name: &str) -> Arc<dyn Backend> {
    let lazy = LazyNode::new(
        name,
        distlock::redis::RedisBackend::CAPABILITIES,
        || async { Err::<Arc<dyn Backend>, Error>(Error::invalid_config("never connected", None)) },
    );
    Arc::new(lazy)
}

/// The matrix's columns: each backend and what it declares.
fn columns() -> Vec<Capabilities> {
    let redlock = RedLock::builder((0..3).map(|i| redis_node(&format!("n{i}"))).collect())
        .build()
        .expect("a RedLock");
    let multi = MultiLock::builder()
        .lock(redis_node("a"), "a")
        .lock(redis_node("b"), "b")
        .build()
        .expect("a MultiLock");
    vec![
        MemoryBackend::new().capabilities(),
        distlock::redis::RedisBackend::CAPABILITIES,
        distlock::postgres::PostgresBackend::CAPABILITIES,
        distlock::postgres::AdvisoryBackend::CAPABILITIES,
        distlock::mysql::MysqlBackend::CAPABILITIES,
        distlock::mysql::GetLockBackend::CAPABILITIES,
        redlock.capabilities(),
        multi.capabilities(),
    ]
}

fn yes(on: bool) -> &'static str {
    if on { "yes" } else { "no" }
}

/// The rows the documentation must show, from the declarations.
fn expected_rows() -> Vec<String> {
    type Row = (&'static str, fn(&Capabilities) -> String);
    let rows: [Row; 12] = [
        ("reentrant mutex", |_| "yes".into()),
        ("fair mutex", |c| yes(c.fair).into()),
        ("read-write lock", |c| yes(c.read_write).into()),
        ("fencing tokens", |c| yes(c.fencing).into()),
        ("semaphore", |c| yes(c.semaphore).into()),
        ("expirable semaphore", |c| yes(c.expirable_semaphore).into()),
        ("count-down latch", |c| yes(c.count_down_latch).into()),
        ("retried requests answered once", |c| {
            yes(c.retry_safe).into()
        }),
        ("starving waiters reserve the lock", |c| {
            yes(c.reservation).into()
        }),
        ("a release wakes one client", |c| {
            yes(c.wakes_one_client).into()
        }),
        ("a waiter waits inside the server", |c| {
            yes(c.waits_in_store).into()
        }),
        ("shared between processes", |c| yes(c.shared).into()),
    ];
    let columns = columns();
    let mut out: Vec<String> = rows
        .iter()
        .map(|(name, cell)| {
            let cells: Vec<String> = columns.iter().map(cell).collect();
            format!("| {name} | {} |", cells.join(" | "))
        })
        .collect();
    let holds: Vec<&str> = columns
        .iter()
        .map(|c| match c.holds {
            HoldModel::Lease => "after its lease",
            HoldModel::Session => "with its session",
            _ => "other",
        })
        .collect();
    out.push(format!(
        "| an abandoned hold ends | {} |",
        holds.join(" | ")
    ));
    out
}

#[test]
fn the_documented_capability_matrix_is_what_the_backends_declare() {
    let source = include_str!("../src/lib.rs");
    let documented: Vec<String> = source
        .lines()
        .filter_map(|line| line.strip_prefix("//! "))
        .skip_while(|line| !line.starts_with("| capability |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(str::to_owned)
        .collect();
    let expected = expected_rows();
    assert_eq!(
        documented,
        expected,
        "the matrix in distlock/src/lib.rs differs from the declarations; it should read:\n{}",
        expected.join("\n")
    );
}
