//! Who holds a lock on PostgreSQL: the hold rows of a name (with when each began), its
//! live waiters and its fencing counter, and what each holder's client said about itself.
//! Plain reads, which a service role's `SELECT` on the tables allows.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use lock_core::{ClientInfo, Error, HeldAs, HolderInfo, Introspect, LockInfo, LockName};
use tokio_postgres::types::Type;

use crate::backend::{PostgresBackend, check_name};
use crate::calls::{Param, arg};

#[async_trait]
impl Introspect for PostgresBackend {
    async fn describe(&self, name: &LockName) -> Result<LockInfo, Error> {
        let text = name.as_str();
        check_name(text)?;
        // Every operator and function is pg_catalog's, named so: a plain statement
        // resolves them through the caller's search_path, where an exact match planted
        // in another schema beats one of PostgreSQL's that needs a cast (third review,
        // R3: `numeric * integer`), and would run with the describing role's rights.
        let statement = format!(
            "SELECT h.owner, h.kind, h.holds,
                    pg_catalog.ceil(extract(epoch FROM h.expires_at OPERATOR(pg_catalog.-) now.at)
                                    OPERATOR(pg_catalog.*) 1000::numeric)::bigint,
                    (extract(epoch FROM h.since) OPERATOR(pg_catalog.*) 1000::numeric)::bigint,
                    c.name, c.host, c.pid,
                    (SELECT pg_catalog.count(*) FROM {s}.waiters w
                      WHERE w.name OPERATOR(pg_catalog.=) $1
                        AND w.alive_until OPERATOR(pg_catalog.>) now.at),
                    (SELECT t.token FROM {s}.tokens t WHERE t.name OPERATOR(pg_catalog.=) $1)
               FROM (SELECT pg_catalog.clock_timestamp() AS at) AS now
               LEFT JOIN {s}.holds h
                      ON h.name OPERATOR(pg_catalog.=) $1
                     AND h.expires_at OPERATOR(pg_catalog.>) now.at
               LEFT JOIN {s}.clients c
                      ON c.id OPERATOR(pg_catalog.=)
                         pg_catalog.regexp_replace(h.owner, ':[^:]*$'::text, ''::text)
                     AND c.until OPERATOR(pg_catalog.>) now.at
              ORDER BY h.owner, h.kind",
            s = self.schema
        );
        let params: [Param<'_>; 1] = [(&text, Type::TEXT)];
        let rows = self.query("describing a lock", &statement, &params).await?;
        let mut info = LockInfo::free(text);
        let mut kinds = Vec::new();
        for row in &rows {
            let waiting: i64 = row.get(8);
            info.waiting = usize::try_from(waiting).unwrap_or(0);
            let token: Option<i64> = row.get(9);
            info.fencing_token = token.and_then(|t| u64::try_from(t).ok()).filter(|t| *t > 0);
            let Some(owner) = row.get::<_, Option<String>>(0) else {
                continue;
            };
            let kind: String = row.get(1);
            let holds: i32 = row.get(2);
            let left: i64 = row.get(3);
            let since: Option<i64> = row.get(4);
            let mut holder = HolderInfo::new(owner, u32::try_from(holds).unwrap_or(0));
            holder.since = since
                .and_then(|ms| u64::try_from(ms).ok())
                .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
            let lease = u64::try_from(left).ok().map(Duration::from_millis);
            if kind == "read" {
                holder.lease_left = lease;
            }
            info.lease_left = info.lease_left.max(lease);
            let client: (Option<String>, Option<String>, Option<i32>) =
                (row.get(5), row.get(6), row.get(7));
            if let (Some(name), Some(host), Some(pid)) = client {
                holder.client = Some(ClientInfo::new(name, host, u32::try_from(pid).unwrap_or(0)));
            }
            kinds.push(kind);
            info.holders.push(holder);
        }
        info.held_as = if kinds.iter().any(|k| k == "write") {
            HeldAs::Write
        } else if kinds.iter().any(|k| k == "read") {
            HeldAs::Read
        } else if kinds.is_empty() {
            HeldAs::Free
        } else {
            HeldAs::Exclusive
        };
        Ok(info)
    }

    async fn held_names(&self, prefix: &str, limit: usize) -> Result<Vec<String>, Error> {
        let pattern = format!("{}%", like_escaped(prefix));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let statement = format!(
            // pg_catalog's operators, named so (see `describe`); LIKE's escape
            // character is the backslash `like_escaped` uses.
            "SELECT DISTINCT name FROM {s}.holds
              WHERE name OPERATOR(pg_catalog.~~) $1
                AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
              ORDER BY name LIMIT $2",
            s = self.schema
        );
        let params: [Param<'_>; 2] = [(&pattern, Type::TEXT), (&limit, Type::INT8)];
        let rows = self
            .query("listing held locks", &statement, &params)
            .await?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    async fn announce(
        &self,
        client_id: &str,
        client: &ClientInfo,
        ttl: Duration,
    ) -> Result<(), Error> {
        let pid = i32::try_from(client.pid).unwrap_or(i32::MAX);
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        let args = [
            arg("p_id", &client_id, "text"),
            arg("p_name", &client.name, "text"),
            arg("p_host", &client.host, "text"),
            arg("p_pid", &pid, "integer"),
            arg("p_ttl_ms", &ttl_ms, "bigint"),
        ];
        self.perform("describing this client", "announce_client", &args)
            .await
    }
}

/// `prefix` with LIKE's pattern characters escaped, so that it matches only itself.
fn like_escaped(prefix: &str) -> String {
    let mut escaped = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefix_matches_only_itself() {
        assert_eq!(super::like_escaped("a_b%c\\"), "a\\_b\\%c\\\\");
    }
}
