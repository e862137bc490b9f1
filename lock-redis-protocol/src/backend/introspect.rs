//! Who holds a lock on Redis: the lock's hash, its queue and waiting clients, each
//! holder's grants hash (when the hold began) and client key (who the client is), and a
//! walk over every master's keys for the held names.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use lock_core::{ClientInfo, Error, HeldAs, HolderInfo, Introspect, LockInfo, LockName};

use super::{RedisBackend, pttl, unexpected};
use crate::slot::key_slot;
use crate::transport::{Reply, Topology};
use crate::{calls, layout};

/// How many keys one step of the walk looks at.
const SCAN_STEP: &str = "200";

#[async_trait]
impl Introspect for RedisBackend {
    async fn describe(&self, name: &LockName) -> Result<LockInfo, Error> {
        let (queue, waiting) = (
            layout::fair_queue_key(name),
            layout::waiting_clients_key(name),
        );
        let token = layout::token_key(name);
        let grants_prefix = layout::grants_key(name, "", false);
        let holds_prefix = format!("{}:", layout::tagged(name));
        let call = calls::LockDescribe {
            lock: layout::lock_key(name),
            queue: &queue,
            waiting: &waiting,
            token: &token,
            grants_prefix: &grants_prefix,
            holds_prefix: &holds_prefix,
        };
        let reply = self.run("describing a lock", &call).await?;
        let mut info = described(name, &reply)?;
        // One read per client: a client's readers share its description.
        let mut clients: std::collections::HashMap<String, Option<ClientInfo>> =
            std::collections::HashMap::new();
        for holder in &mut info.holders {
            let id = holder.client_id().to_owned();
            let client = match clients.get(&id) {
                Some(known) => known.clone(),
                None => {
                    let read = self.client(&id).await?;
                    clients.insert(id, read.clone());
                    read
                }
            };
            holder.client = client;
        }
        Ok(info)
    }

    async fn held_names(&self, prefix: &str, limit: usize) -> Result<Vec<String>, Error> {
        let pattern = format!("{}*", glob_escaped(prefix));
        let mut names = Vec::new();
        for route in self.one_key_per_master().await? {
            let mut cursor = "0".to_owned();
            loop {
                let call = calls::LocksScan {
                    route: &route,
                    cursor: &cursor,
                    pattern: &pattern,
                    step: SCAN_STEP,
                };
                let reply = self.run("listing held locks", &call).await?;
                let (next, found) = scanned(&reply)?;
                names.extend(found);
                if next == "0" || names.len() >= limit {
                    break;
                }
                cursor = next;
            }
            if names.len() >= limit {
                break;
            }
        }
        names.truncate(limit);
        Ok(names)
    }

    async fn announce(
        &self,
        client_id: &str,
        client: &ClientInfo,
        ttl: Duration,
    ) -> Result<(), Error> {
        let key = layout::client_key(client_id);
        let description = format!("{}\n{}\n{}", client.name, client.host, client.pid);
        let ttl_ms = u64::try_from(ttl.as_millis())
            .unwrap_or(u64::MAX)
            .to_string();
        let call = calls::ClientAnnounce {
            client: &key,
            description: &description,
            lives_ms: &ttl_ms,
        };
        self.run("describing this client", &call).await.map(drop)
    }
}

impl RedisBackend {
    /// What the client `client_id` said about itself, if it did (and lately).
    async fn client(&self, client_id: &str) -> Result<Option<ClientInfo>, Error> {
        let key = layout::client_key(client_id);
        let call = calls::ClientRead { client: &key };
        let reply = self.run("reading a client", &call).await?;
        Ok(match reply {
            Reply::Bytes(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let mut lines = text.splitn(3, '\n');
                match (lines.next(), lines.next(), lines.next()) {
                    (Some(name), Some(host), Some(pid)) => {
                        pid.parse().ok().map(|pid| ClientInfo::new(name, host, pid))
                    }
                    _ => None,
                }
            }
            _ => None,
        })
    }

    /// A key that routes a script to each master: one for a single server, one in a slot
    /// of each master's for a cluster.
    async fn one_key_per_master(&self) -> Result<Vec<String>, Error> {
        if self.transport.topology() != Topology::Cluster {
            return Ok(vec!["redisson_lock_scan".to_owned()]);
        }
        let call = calls::ClusterSlots {
            route: "redisson_lock_scan",
        };
        let reply = self.run("reading the cluster's slots", &call).await?;
        let Reply::Array(ranges) = &reply else {
            return Err(unexpected("cluster slots", &reply));
        };
        let mut routes = Vec::new();
        for range in ranges {
            let Reply::Array(parts) = range else {
                return Err(unexpected("cluster slots", &reply));
            };
            let (Some(Reply::Int(first)), Some(Reply::Int(last))) = (parts.first(), parts.get(1))
            else {
                return Err(unexpected("cluster slots", &reply));
            };
            routes.push(
                key_in_slots(*first, *last).ok_or_else(|| unexpected("cluster slots", &reply))?,
            );
        }
        Ok(routes)
    }
}

/// A key whose slot lies in `first..=last`.
fn key_in_slots(first: i64, last: i64) -> Option<String> {
    (0..100_000u32)
        .map(|n| format!("redisson_lock_scan:{n}"))
        .find(|key| (first..=last).contains(&i64::from(key_slot(key))))
}

/// `prefix` with SCAN's pattern characters escaped, so that it matches only itself.
fn glob_escaped(prefix: &str) -> String {
    let mut escaped = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Bytes(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Reply::Status(status) => Some(status.clone()),
        Reply::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(reply: &Reply) -> Option<i64> {
    match reply {
        Reply::Int(n) => Some(*n),
        other => text(other).and_then(|t| t.parse().ok()),
    }
}

/// The describe script's answer as a [`LockInfo`].
fn described(name: &LockName, reply: &Reply) -> Result<LockInfo, Error> {
    let bad = || unexpected("describe", reply);
    let Reply::Array(items) = reply else {
        return Err(bad());
    };
    let [kind, mode, ttl, waiting, token, Reply::Array(holders)] = items.as_slice() else {
        return Err(bad());
    };
    let kind = text(kind).ok_or_else(bad)?;
    let mut info = LockInfo::free(name.as_str());
    info.waiting = number(waiting)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(bad)?;
    info.fencing_token = number(token)
        .and_then(|n| u64::try_from(n).ok())
        .filter(|t| *t > 0);
    match kind.as_str() {
        "hash" => {}
        "none" => return Ok(info),
        other => {
            return Err(Error::incompatible(
                name.as_str(),
                format!("the key holds a {other}, not a lock"),
            ));
        }
    }
    info.held_as = match text(mode).ok_or_else(bad)?.as_str() {
        "read" => HeldAs::Read,
        "write" => HeldAs::Write,
        _ => HeldAs::Exclusive,
    };
    info.lease_left = number(ttl).and_then(pttl);
    for holder in holders.chunks(4) {
        let [field, holds, since, lease] = holder else {
            return Err(bad());
        };
        let field = text(field).ok_or_else(bad)?;
        // A writer's field is `<owner>:write`.
        let owner = field.strip_suffix(":write").unwrap_or(&field);
        let holds = number(holds)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(bad)?;
        let mut described = HolderInfo::new(owner, holds);
        described.since = number(since)
            .and_then(|ms| u64::try_from(ms).ok())
            .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        described.lease_left = number(lease).and_then(pttl);
        info.holders.push(described);
    }
    info.holders.sort_by(|a, b| a.owner.cmp(&b.owner));
    Ok(info)
}

/// A walk step's answer: the next cursor and the names found.
fn scanned(reply: &Reply) -> Result<(String, Vec<String>), Error> {
    let bad = || unexpected("scan", reply);
    let Reply::Array(items) = reply else {
        return Err(bad());
    };
    let [cursor, Reply::Array(names)] = items.as_slice() else {
        return Err(bad());
    };
    let cursor = text(cursor).ok_or_else(bad)?;
    let names = names.iter().filter_map(text).collect();
    Ok((cursor, names))
}
