//! A three-master cluster: slot ownership and node restarts.

use lock_testkit::RedisCluster;

#[tokio::test]
async fn cluster_routes_keys_and_survives_a_node_restart() {
    let mut cluster = RedisCluster::start(3).await;
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.urls().len(), 3);
    let states: Vec<String> = cluster.query_all(&["CLUSTER", "INFO"]).await;
    assert!(states.iter().all(|s| s.contains("cluster_state:ok")));

    let key = "lock:{order-42}";
    let owner = cluster.node_for_key(key).await;
    let owner_port = owner.port();
    let () = owner.command(&["SET", key, "v"]).await;
    for node in cluster.nodes().iter().filter(|n| n.port() != owner_port) {
        let client = redis::Client::open(node.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let err = redis::cmd("GET")
            .arg(key)
            .query_async::<Option<String>>(&mut conn)
            .await
            .expect_err("a non-owner answers with MOVED");
        assert!(err.to_string().to_uppercase().contains("MOVED"), "{err}");
    }

    // Keys land on different nodes.
    let mut owners = std::collections::HashSet::new();
    for i in 0..30 {
        owners.insert(cluster.node_for_key(&format!("k{i}")).await.port());
    }
    assert_eq!(owners.len(), 3);

    cluster.restart_node_for_key(key).await;
    let states: Vec<String> = cluster.query_all(&["CLUSTER", "INFO"]).await;
    assert!(states.iter().all(|s| s.contains("cluster_state:ok")));
    let owner = cluster.node_for_key(key).await;
    assert_eq!(owner.port(), owner_port);
    let value: Option<String> = owner.command(&["GET", key]).await;
    assert_eq!(value, None);
    let () = owner.command(&["SET", key, "again"]).await;
}

#[tokio::test]
async fn a_single_master_cluster_owns_every_slot() {
    let cluster = RedisCluster::start(1).await;
    assert_eq!(cluster.nodes().len(), 1);
    let states: Vec<String> = cluster.query_all(&["CLUSTER", "INFO"]).await;
    assert!(
        states
            .iter()
            .all(|s| s.contains("cluster_state:ok") && s.contains("cluster_slots_assigned:16384")),
        "{states:?}"
    );
    let node = cluster.node_for_key("x").await;
    let () = node.command(&["SET", "x", "1"]).await;
    let value: Option<String> = node.command(&["GET", "x"]).await;
    assert_eq!(value.as_deref(), Some("1"));
}
