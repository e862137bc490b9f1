//! The Sentinel deployment starts, and a killed master is replaced by the replica.

use lock_testkit::RedisSentinel;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_by_the_replica() {
    let mut deployment = RedisSentinel::start().await;
    let () = deployment.master().command(&["SET", "k", "v"]).await;
    let old_port = deployment.master().port();
    assert!(deployment.url().starts_with("redis+sentinel://127.0.0.1:"));
    assert_eq!(deployment.sentinel_urls().len(), 3);
    // Let the write reach the replica before the master dies.
    let acknowledged: i64 = deployment.master().command(&["WAIT", "1", "1000"]).await;
    assert_eq!(acknowledged, 1);
    deployment.kill_master().await;
    assert_ne!(deployment.master().port(), old_port);
    assert!(deployment.replica().is_none());
    let value: String = deployment.master().command(&["GET", "k"]).await;
    assert_eq!(value, "v");
}
