//! Who holds the locks: [`Introspect`] for [`MysqlBackend`], read from the names' rows
//! (the machine says the holder, its holds, lease and waiters) and the clients' table.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::machine::{self, ticks};
use lock_core::{ClientInfo, Error, Introspect, LockInfo, LockName};
use mysql_async::Row;

use crate::backend::MysqlBackend;
use crate::schema::{hex, key};
use crate::store::NOW;

#[async_trait]
impl Introspect for MysqlBackend {
    async fn describe(&self, name: &LockName) -> Result<LockInfo, Error> {
        let mut info = LockInfo::free(name.as_str());
        let during = "describing a lock";
        let Some((state, clock)) = self.store.read(name.as_str(), during).await? else {
            return Ok(info);
        };
        if !machine::describe(&state.machine, (clock, state.read_write), &mut info) {
            return Ok(info);
        }
        for holder in &mut info.holders {
            let read = format!(
                "SELECT name, host, pid FROM {} WHERE id = {} AND until > ({NOW})",
                self.store.tables().clients(),
                hex(holder.client_id().as_bytes())
            );
            let mut rows = self.store.rows(read, during).await?;
            holder.client = rows.first_mut().and_then(client);
        }
        Ok(info)
    }

    async fn held_names(&self, prefix: &str, limit: usize) -> Result<Vec<String>, Error> {
        // A plain read: InnoDB serves it from committed versions, blocking no writer.
        let read = format!(
            "SELECT name FROM {} WHERE held_until > ({NOW}) AND LEFT(name, {}) = {} LIMIT {limit}",
            self.store.tables().names(),
            prefix.len(),
            hex(prefix.as_bytes())
        );
        let rows = self.store.rows(read, "listing held locks").await?;
        Ok(rows
            .into_iter()
            .filter_map(|mut row| row.take_opt::<Vec<u8>, usize>(0)?.ok())
            .filter_map(|name| String::from_utf8(name).ok())
            .collect())
    }

    async fn announce(
        &self,
        client_id: &str,
        client: &ClientInfo,
        ttl: Duration,
    ) -> Result<(), Error> {
        let write = format!(
            "INSERT INTO {clients} (id, name, host, pid, until) VALUES ({id}, {name}, {host}, {pid}, ({NOW}) + {ttl}) \
             ON DUPLICATE KEY UPDATE name = VALUES(name), host = VALUES(host), pid = VALUES(pid), until = VALUES(until)",
            clients = self.store.tables().clients(),
            id = hex(&key(client_id)),
            name = hex(client.name.as_bytes()),
            host = hex(client.host.as_bytes()),
            pid = client.pid,
            ttl = ticks(ttl),
        );
        self.store.rows(write, "announcing the client").await?;
        Ok(())
    }
}

/// A client's description from its row.
fn client(row: &mut Row) -> Option<ClientInfo> {
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    let name = text(row.take_opt::<Vec<u8>, usize>(0)?.ok()?);
    let host = text(row.take_opt::<Vec<u8>, usize>(1)?.ok()?);
    let pid = row.take_opt::<u32, usize>(2)?.ok()?;
    Some(ClientInfo::new(name, host, pid))
}
