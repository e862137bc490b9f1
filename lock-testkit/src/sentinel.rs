//! [`RedisSentinel`]: a master, a replica and three Sentinels watching them.

use std::time::Duration;

use tokio::time::Instant;

use crate::RedisServer;

/// The name the Sentinels monitor the master under.
const MASTER_NAME: &str = "locks";
/// How long setup and failover may take before the test is told why it failed.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);

/// A Sentinel deployment: one master, one replica and three Sentinels (quorum 2) with
/// short timeouts (the master is considered down after 1 s). Dropping it stops all.
#[derive(Debug)]
pub struct RedisSentinel {
    master: Option<RedisServer>,
    replica: RedisServer,
    sentinels: Vec<RedisServer>,
}

impl RedisSentinel {
    /// Starts the deployment and waits until the replica follows the master. The
    /// Sentinels answer for the master at once (it is in their configuration); they
    /// find the replica and each other over the next seconds, which only a failover
    /// needs, so [`RedisSentinel::kill_master`] waits for that itself.
    pub async fn start() -> RedisSentinel {
        // Diskless full syncs wait 5 s by default for more replicas to join one transfer;
        // there is only one.
        let master = RedisServer::builder()
            .config_line("repl-diskless-sync-delay 0")
            .start()
            .await;
        let replica = RedisServer::builder()
            .config_line(format!("replicaof 127.0.0.1 {}", master.port()))
            .start()
            .await;
        let mut sentinels = Vec::with_capacity(3);
        for _ in 0..3 {
            sentinels.push(
                RedisServer::builder()
                    .sentinel()
                    .config_line(format!(
                        "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2",
                        master.port()
                    ))
                    .config_line(format!(
                        "sentinel down-after-milliseconds {MASTER_NAME} 1000"
                    ))
                    .config_line(format!("sentinel failover-timeout {MASTER_NAME} 3000"))
                    .config_line(format!("sentinel parallel-syncs {MASTER_NAME} 1"))
                    .start()
                    .await,
            );
        }
        let deployment = RedisSentinel {
            master: Some(master),
            replica,
            sentinels,
        };
        deployment.settle(false).await;
        deployment
    }

    /// Waits until the replica's link to the master is up and, with `for_failover`,
    /// until every Sentinel knows the replica and the other Sentinels.
    async fn settle(&self, for_failover: bool) {
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let linked: String = self.replica.command(&["INFO", "replication"]).await;
            let mut ready = linked.contains("master_link_status:up");
            for sentinel in self.sentinels.iter().filter(|_| for_failover) {
                let replicas: Vec<redis::Value> = sentinel
                    .command(&["SENTINEL", "REPLICAS", MASTER_NAME])
                    .await;
                let peers: Vec<redis::Value> = sentinel
                    .command(&["SENTINEL", "SENTINELS", MASTER_NAME])
                    .await;
                ready &= !replicas.is_empty() && peers.len() == self.sentinels.len() - 1;
            }
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinel deployment did not settle within {SETTLE_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The name the Sentinels know the master by.
    #[must_use]
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// `redis://` URLs of the three Sentinels.
    #[must_use]
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The `redis+sentinel://host:port,host:port,host:port/NAME` URL of the deployment.
    #[must_use]
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The current master (after [`RedisSentinel::kill_master`], the promoted replica).
    #[must_use]
    pub fn master(&self) -> &RedisServer {
        self.master.as_ref().unwrap_or(&self.replica)
    }

    /// The replica (`None` once it was promoted).
    #[must_use]
    pub fn replica(&self) -> Option<&RedisServer> {
        self.master.as_ref().map(|_| &self.replica)
    }

    /// Restarts the master quickly (kill -9, then the same port; its data is lost, and
    /// the replica resynchronises from the empty master). Too quick for a failover.
    pub async fn restart_master(&mut self) {
        match self.master.as_mut() {
            Some(master) => master.restart().await,
            None => self.replica.restart().await,
        }
    }

    /// Kills the master (kill -9, its data gone) and waits until the Sentinels have
    /// promoted the replica.
    pub async fn kill_master(&mut self) {
        assert!(self.master.is_some(), "the master was already killed");
        // A failover needs Sentinels that know the replica and each other.
        self.settle(true).await;
        drop(self.master.take());
        let wanted = self.replica.port().to_string();
        let deadline = Instant::now() + SETTLE_TIMEOUT;
        loop {
            let mut promoted = true;
            for sentinel in &self.sentinels {
                let addr: Vec<String> = sentinel
                    .command(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME])
                    .await;
                promoted &= addr.get(1) == Some(&wanted);
            }
            // A Sentinel that promotes a replica closes its clients' connections: a
            // reset ROLE is asked again.
            let role: Vec<redis::Value> = self
                .replica
                .try_command(&["ROLE"])
                .await
                .unwrap_or_default();
            let is_master =
                matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master");
            if promoted && is_master {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the Sentinels did not promote the replica within {SETTLE_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
