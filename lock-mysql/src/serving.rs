//! Which server a transaction runs on, and the failover quarantine it starts when that
//! server is not the one the epoch row names (a replica that took over; see
//! [`crate::store`]).

use std::time::Duration;

use mysql_async::prelude::Queryable;

use crate::pool::Pooled;
use crate::schema::Tables;
use crate::store::Failure;

/// The server a transaction runs on (`@@server_id`), and until when nothing is granted
/// after it took over from another (0: no quarantine).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Serving {
    pub(crate) server: u32,
    pub(crate) quarantine_until: u64,
}

/// Who serves, and its quarantine: the epoch as read, or, where it names another
/// server, a quarantine this transaction starts (none where it names no server: the
/// tables are new).
pub(crate) async fn serving(
    conn: &mut Pooled,
    (tables, quarantine): (&Tables, Duration),
    server: u32,
    (named, quarantine_until): (Option<u32>, Option<u64>),
    clock: u64,
) -> Result<Serving, Failure> {
    let mut serving = Serving {
        server,
        quarantine_until: quarantine_until.unwrap_or(0),
    };
    if named == Some(server) {
        return Ok(serving);
    }
    let until = match named {
        Some(before) => {
            let until = clock.saturating_add(lock_core::backend::machine::ticks(quarantine));
            tracing::warn!(
                target: lock_core::TRACING_TARGET,
                before,
                now = server,
                quarantine = ?quarantine,
                "the MySQL server changed (a replica took over?): no lock is granted \
                 until every hold the old server may have granted has run out"
            );
            until
        }
        None => 0,
    };
    let epoch = tables.epoch();
    conn.query_drop(format!(
        "INSERT INTO {epoch} (id, server_id, quarantine_until) VALUES (1, {server}, {until}) \
         ON DUPLICATE KEY UPDATE quarantine_until = GREATEST(quarantine_until, \
         VALUES(quarantine_until)), server_id = VALUES(server_id)"
    ))
    .await?;
    serving.quarantine_until = serving.quarantine_until.max(until);
    Ok(serving)
}
