//! Cutting pub/sub connections, to test that subscribers heal.

use std::time::Duration;

use crate::server::{RedisServer, connect};

/// Kills every pub/sub connection on `server`: each client in `CLIENT LIST` with
/// `sub`, `psub` or `ssub` above zero, or with the `P` flag, is closed with
/// `CLIENT KILL ID`. The testkit's own connection is spared. Returns how many were killed.
pub async fn kill_pubsub_clients(server: &RedisServer) -> usize {
    let mut conn = connect(server.port(), Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", server.url()));
    let own_id: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("CLIENT ID on {}: {e}", server.url()));
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("CLIENT LIST on {}: {e}", server.url()));
    let mut killed = 0;
    for id in pubsub_client_ids(&list) {
        if id == own_id {
            continue;
        }
        let n: i64 = redis::cmd("CLIENT")
            .arg(&["KILL", "ID", &id.to_string()])
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("CLIENT KILL ID {id} on {}: {e}", server.url()));
        // Zero means the client went away on its own in the meantime.
        killed += usize::try_from(n).unwrap_or(0);
    }
    killed
}

/// The ids of the pub/sub clients in a `CLIENT LIST` reply.
fn pubsub_client_ids(list: &str) -> Vec<i64> {
    list.lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split_whitespace()
                    .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            };
            let counts_any = ["sub", "psub", "ssub"]
                .iter()
                .any(|name| field(name).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) > 0);
            let flagged = field("flags").is_some_and(|flags| flags.contains('P'));
            if counts_any || flagged {
                field("id")?.parse().ok()
            } else {
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::pubsub_client_ids;

    #[test]
    fn finds_subscribers_by_counts_and_flags() {
        let list = "id=3 addr=127.0.0.1:1 flags=N db=0 sub=0 psub=0 ssub=0 cmd=client|list\n\
                    id=4 addr=127.0.0.1:2 flags=P db=0 sub=1 psub=0 ssub=0 cmd=subscribe\n\
                    id=5 addr=127.0.0.1:3 flags=N db=0 sub=0 psub=2 ssub=0 cmd=psubscribe\n\
                    id=6 addr=127.0.0.1:4 flags=N db=0 sub=0 psub=0 ssub=1 cmd=ssubscribe\n\
                    id=7 addr=127.0.0.1:5 flags=P db=0 cmd=subscribe\n";
        assert_eq!(pubsub_client_ids(list), vec![4, 5, 6, 7]);
    }
}
