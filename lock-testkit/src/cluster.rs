//! A Redis Cluster of masters, one `redis-server` process per node.

use std::fmt;
use std::time::Duration;

use redis::{FromRedisValue, Value};
use tokio::time::Instant;

use crate::proxy::FaultProxy;
use crate::server::{RedisServer, cluster_state_ok, connect, log_tail};

/// The number of hash slots in a Redis Cluster.
const SLOTS: usize = 16_384;
/// How long a cluster may take to form (or to settle after a node restart).
const FORM_TIMEOUT: Duration = Duration::from_secs(20);
/// How often the cluster's state is polled.
const POLL: Duration = Duration::from_millis(50);

/// A Redis Cluster of `N` masters without replicas, each node a [`RedisServer`] on a free
/// port whose bus port (port + 10000) is free too. Slots are split evenly in order:
/// node 0 owns the first range. Dropping it stops every node.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// The inclusive slot range each node owns, by node index.
    ranges: Vec<(u16, u16)>,
    /// With [`RedisCluster::start_behind_proxies`]: the proxy each node announces as its
    /// address, by node index.
    proxies: Vec<FaultProxy>,
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .zip(&self.ranges)
            .map(|(node, (start, end))| format!("127.0.0.1:{} slots {start}-{end}", node.port()))
            .collect();
        f.debug_struct("RedisCluster")
            .field("nodes", &nodes)
            .field("proxies", &self.proxies)
            .finish()
    }
}

impl RedisCluster {
    /// Starts a cluster of `masters` nodes: slots split evenly with
    /// `CLUSTER ADDSLOTSRANGE`, joined with `CLUSTER MEET`. Returns once every node reports
    /// `cluster_state:ok` and every node's `CLUSTER SLOTS` shows all 16384 slots with the
    /// same owners. Panics with the nodes' state if that takes more than about 20 s.
    pub async fn start(masters: usize) -> RedisCluster {
        Self::form(masters, false).await
    }

    /// Like [`RedisCluster::start`], but every node announces a [`FaultProxy`] in front
    /// of it as its address (`cluster-announce-port`), so that cluster clients, which
    /// learn node addresses from the cluster, reach each node only through its proxy.
    pub async fn start_behind_proxies(masters: usize) -> RedisCluster {
        Self::form(masters, true).await
    }

    /// The proxy in front of each node, by node index (empty unless started behind
    /// proxies).
    #[must_use]
    pub fn proxies(&self) -> &[FaultProxy] {
        &self.proxies
    }

    /// The index of the node that owns `key`'s hash slot.
    pub async fn node_index_for_key(&self, key: &str) -> usize {
        self.index_for_key(key).await
    }

    async fn form(masters: usize, behind_proxies: bool) -> RedisCluster {
        assert!(
            (1..=SLOTS).contains(&masters),
            "a cluster needs between 1 and {SLOTS} masters, not {masters}"
        );
        let deadline = Instant::now() + FORM_TIMEOUT;
        let mut nodes = Vec::with_capacity(masters);
        for _ in 0..masters {
            nodes.push(RedisServer::builder().cluster_node().start().await);
        }
        let ranges: Vec<(u16, u16)> = (0..masters)
            .map(|i| {
                let start = i * SLOTS / masters;
                let end = (i + 1) * SLOTS / masters - 1;
                (slot(start), slot(end))
            })
            .collect();
        let mut proxies = Vec::new();
        if behind_proxies {
            for node in &nodes {
                let upstream = format!("127.0.0.1:{}", node.port());
                let proxy = FaultProxy::start(upstream.parse().expect("a node's address")).await;
                let (announced, bus) =
                    (proxy.port().to_string(), (node.port() + 10_000).to_string());
                let () = node
                    .command(&["CONFIG", "SET", "cluster-announce-port", &announced])
                    .await;
                let () = node
                    .command(&["CONFIG", "SET", "cluster-announce-bus-port", &bus])
                    .await;
                proxies.push(proxy);
            }
        }
        for (node, (start, end)) in nodes.iter().zip(&ranges) {
            add_slots(node, *start, *end).await;
        }
        let first = &nodes[0];
        for node in &nodes[1..] {
            let port = node.port().to_string();
            let () = first
                .command(&["CLUSTER", "MEET", "127.0.0.1", &port])
                .await;
        }
        let cluster = RedisCluster {
            nodes,
            ranges,
            proxies,
        };
        cluster.wait_converged(deadline, "form").await;
        cluster
    }

    /// `redis://127.0.0.1:PORT` of every node, in node order.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The `redis+cluster://127.0.0.1:PORT,...` URL of every node, as a client takes it.
    #[must_use]
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The nodes, in order of their slot ranges.
    #[must_use]
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Runs `args` on every node, in node order.
    pub async fn query_all<T: FromRedisValue>(&self, args: &[&str]) -> Vec<T> {
        let mut replies = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            replies.push(node.command(args).await);
        }
        replies
    }

    /// The node that owns `key`'s hash slot.
    pub async fn node_for_key(&self, key: &str) -> &RedisServer {
        &self.nodes[self.index_for_key(key).await]
    }

    /// Restarts the node owning `key` (kill -9; data lost, identity and slots kept), then
    /// waits until every node reports `cluster_state:ok` with the same slot owners again.
    pub async fn restart_node_for_key(&mut self, key: &str) {
        let index = self.index_for_key(key).await;
        let deadline = Instant::now() + FORM_TIMEOUT;
        self.nodes[index].restart().await;
        self.wait_converged(deadline, "settle after a node restart")
            .await;
    }

    async fn index_for_key(&self, key: &str) -> usize {
        let slot: i64 = self.nodes[0].command(&["CLUSTER", "KEYSLOT", key]).await;
        self.ranges
            .iter()
            .position(|(start, end)| (i64::from(*start)..=i64::from(*end)).contains(&slot))
            .unwrap_or_else(|| panic!("slot {slot} of key {key:?} is owned by no node"))
    }

    /// The slot map every node must report: `(start, end, port)`, merged and sorted.
    fn expected_map(&self) -> Vec<(u16, u16, u16)> {
        let map = self
            .nodes
            .iter()
            .zip(&self.ranges)
            .enumerate()
            .map(|(i, (node, (start, end)))| {
                let port = self.proxies.get(i).map_or(node.port(), FaultProxy::port);
                (*start, *end, port)
            })
            .collect();
        normalize(map)
    }

    /// Polls until every node reports `cluster_state:ok` and the expected slot map.
    async fn wait_converged(&self, deadline: Instant, what: &str) {
        let expected = self.expected_map();
        loop {
            let mut lagging = Vec::new();
            for node in &self.nodes {
                if let Err(why) = node_converged(node, &expected).await {
                    lagging.push((node, why));
                }
            }
            let Some((first, _)) = lagging.first() else {
                return;
            };
            if Instant::now() >= deadline {
                let states: Vec<String> = lagging
                    .iter()
                    .map(|(node, why)| format!("  127.0.0.1:{}: {why}", node.port()))
                    .collect();
                panic!(
                    "the {}-node Redis Cluster did not {what} within {FORM_TIMEOUT:?}:\n{}\n{}",
                    self.nodes.len(),
                    states.join("\n"),
                    log_tail(first.dir())
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

fn slot(n: usize) -> u16 {
    u16::try_from(n).expect("slot numbers fit in u16")
}

/// Assigns `start..=end` to `node`, with `ADDSLOTSRANGE` (Redis 7) or `ADDSLOTS`.
async fn add_slots(node: &RedisServer, start: u16, end: u16) {
    let (first, last) = (start.to_string(), end.to_string());
    let mut conn = connect(node.port(), Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", node.url()));
    let ranged: redis::RedisResult<()> = redis::cmd("CLUSTER")
        .arg(&["ADDSLOTSRANGE", &first, &last])
        .query_async(&mut conn)
        .await;
    if ranged.is_ok() {
        return;
    }
    // Redis before 7.0 has no ADDSLOTSRANGE.
    let slots: Vec<String> = (start..=end).map(|s| s.to_string()).collect();
    let mut args = vec!["CLUSTER", "ADDSLOTS"];
    args.extend(slots.iter().map(String::as_str));
    let () = node.command(&args).await;
}

/// `Ok` if `node` reports `cluster_state:ok` and the expected slot map; else why not.
async fn node_converged(node: &RedisServer, expected: &[(u16, u16, u16)]) -> Result<(), String> {
    if !cluster_state_ok(node.port()).await {
        return Err("cluster_state is not ok".to_owned());
    }
    let mut conn = connect(node.port(), Duration::from_millis(500))
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("CLUSTER SLOTS failed: {e}"))?;
    let map =
        parse_slots(&reply).ok_or_else(|| format!("unexpected CLUSTER SLOTS reply {reply:?}"))?;
    if map == expected {
        Ok(())
    } else {
        Err(format!(
            "CLUSTER SLOTS shows {map:?}, expected {expected:?}"
        ))
    }
}

/// `(start, end, master port)` for every entry of a `CLUSTER SLOTS` reply, normalized.
fn parse_slots(reply: &Value) -> Option<Vec<(u16, u16, u16)>> {
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut map = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let (start, end, master) = (fields.first()?, fields.get(1)?, fields.get(2)?);
        let Value::Array(master) = master else {
            return None;
        };
        map.push((as_u16(start)?, as_u16(end)?, as_u16(master.get(1)?)?));
    }
    Some(normalize(map))
}

fn as_u16(value: &Value) -> Option<u16> {
    match value {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    }
}

/// Sorts ranges and merges adjacent ones with the same owner.
fn normalize(mut map: Vec<(u16, u16, u16)>) -> Vec<(u16, u16, u16)> {
    map.sort_unstable();
    let mut merged: Vec<(u16, u16, u16)> = Vec::with_capacity(map.len());
    for (start, end, port) in map {
        match merged.last_mut() {
            Some(last) if last.2 == port && u32::from(last.1) + 1 == u32::from(start) => {
                last.1 = end;
            }
            _ => merged.push((start, end, port)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn normalize_merges_adjacent_ranges_of_one_owner() {
        let map = vec![(10, 20, 2), (0, 4, 1), (5, 9, 1), (21, 30, 1)];
        assert_eq!(normalize(map), vec![(0, 9, 1), (10, 20, 2), (21, 30, 1)]);
    }
}
