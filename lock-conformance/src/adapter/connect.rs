//! Connecting: bad input is a typed error within the connect timeout, every URL form
//! reaches its deployment or fails naming why, and TLS works and fails cleanly.

use crate::timing::{ms, secs};

use lock_core::ErrorKind;
use lock_testkit::{RedisCluster, RedisSentinel, RedisServer};
use tokio::time::Instant;

use super::{AdapterConnect, ConnectSpec, fails_in_time, hand_over, locks, two_clients};

pub async fn bad_urls_are_config_errors_before_any_network(connect: &AdapterConnect) {
    for url in [
        "",
        "http://localhost",
        "redis://:notaport",
        "redis+cluster://",
        "redis+cluster://,",
        "redis+cluster://a:notaport",
        "redis+sentinel://127.0.0.1:1",
        "not a url",
    ] {
        let started = Instant::now();
        let err = fails_in_time(connect, ConnectSpec::new(url)).await;
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url:?}: {err}");
        assert!(
            !err.chain().to_string().contains("notaport"),
            "the URL is not echoed"
        );
        assert!(started.elapsed() < secs(1), "{url:?} took a while");
    }
}

pub async fn refused_connection_is_a_connection_error(connect: &AdapterConnect) {
    // A port that was free a moment ago: nothing listens there.
    let port = lock_testkit::free_port();
    let mut spec = ConnectSpec::new(format!("redis://127.0.0.1:{port}"));
    spec.connect_timeout = ms(500);
    let err = fails_in_time(connect, spec).await;
    assert_eq!(err.kind(), ErrorKind::Connection, "{}", err.chain());
}

pub async fn silent_server_is_a_connection_error_within_the_timeout(connect: &AdapterConnect) {
    // Accepts connections and never answers: the handshake must not hang.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let mut spec = ConnectSpec::new(format!("redis://127.0.0.1:{port}"));
    spec.connect_timeout = ms(500);
    let err = fails_in_time(connect, spec).await;
    assert_eq!(err.kind(), ErrorKind::Connection, "{}", err.chain());
    accepting.abort();
}

pub async fn cluster_url_on_a_standalone_server_is_an_error(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let spec = ConnectSpec::new(format!("redis+cluster://127.0.0.1:{}", server.port()));
    let err = fails_in_time(connect, spec).await;
    assert!(
        matches!(err.kind(), ErrorKind::InvalidConfig | ErrorKind::Connection),
        "{}",
        err.chain().to_string()
    );
}

pub async fn single_server_url_on_a_cluster_node_is_a_config_error(connect: &AdapterConnect) {
    let cluster = RedisCluster::start(3).await;
    let err = fails_in_time(connect, ConnectSpec::new(cluster.urls()[0].clone())).await;
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{}", err.chain());
    // The cluster form of the same nodes works.
    let url = cluster.url();
    let (a, b) = two_clients(connect, &url).await;
    hand_over(&a, &b, "adapter:cluster").await;
}

pub async fn sentinel_with_an_unknown_master_is_an_error_within_the_timeout(
    connect: &AdapterConnect,
) {
    let deployment = RedisSentinel::start().await;
    let url = deployment
        .url()
        .replace(deployment.master_name(), "no-such-master");
    let mut spec = ConnectSpec::new(url);
    spec.connect_timeout = secs(1);
    let err = fails_in_time(connect, spec).await;
    assert!(
        matches!(err.kind(), ErrorKind::InvalidConfig | ErrorKind::Connection),
        "{}",
        err.chain().to_string()
    );
    // The right name works.
    let (a, b) = two_clients(connect, &deployment.url()).await;
    hand_over(&a, &b, "adapter:sentinel").await;
}

/// Needs the adapter's TLS support (its `tls` feature).
pub async fn locks_work_over_tls_and_a_wrong_setup_is_a_typed_error(connect: &AdapterConnect) {
    let certificates = lock_testkit::TestCertificates::generate();
    let tls_port = lock_testkit::free_port();
    let server = certificates
        .serve(RedisServer::builder(), tls_port)
        .start()
        .await;
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let trusting = |url: &str| {
        let mut spec = ConnectSpec::new(url);
        spec.root_certificate = Some(certificates.ca_pem());
        spec
    };
    let a = match locks(connect, trusting(&url)).await {
        Ok(locks) => locks,
        Err(err) => panic!("connecting over TLS: {}", err.chain()),
    };
    let b = locks(connect, trusting(&url)).await.unwrap();
    hand_over(&a, &b, "tls:m").await;

    // An untrusted server certificate.
    let err = fails_in_time(connect, ConnectSpec::new(url.clone())).await;
    assert!(
        matches!(err.kind(), ErrorKind::Connection | ErrorKind::InvalidConfig),
        "{}",
        err.chain().to_string()
    );
    // TLS to the plain port.
    let plain = format!("rediss://127.0.0.1:{}", server.port());
    let err = fails_in_time(connect, trusting(&plain)).await;
    assert!(
        matches!(err.kind(), ErrorKind::Connection | ErrorKind::InvalidConfig),
        "{}",
        err.chain().to_string()
    );
}

/// A server that requires a password, reached without one, is refused at connect (as a
/// wrong password is), not at the first lock; an unreachable host is named in the error.
pub async fn a_missing_password_and_an_unknown_host_fail_at_connect(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    // Set after start: the testkit's readiness check has no password.
    let () = server
        .command(&["CONFIG", "SET", "requirepass", "s3cret"])
        .await;
    let anonymous = ConnectSpec::new(format!("redis://127.0.0.1:{}", server.port()));
    let err = fails_in_time(connect, anonymous).await;
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{}", err.chain());
    let text = err.chain().to_string().to_lowercase();
    assert!(
        text.contains("auth") || text.contains("password"),
        "the error says authentication failed: {text}"
    );

    let port = lock_testkit::free_port();
    let nowhere = ConnectSpec::new(format!("redis://127.0.0.1:{port}"));
    let err = fails_in_time(connect, nowhere).await;
    assert_eq!(err.kind(), ErrorKind::Connection, "{}", err.chain());
    assert!(
        err.chain()
            .to_string()
            .contains(&format!("127.0.0.1:{port}")),
        "the error names the address it tried: {}",
        err.chain()
    );
}

/// A database number the server lacks (`/99`, where Redis has 16) is a configuration
/// error said at connect, not a connection error to retry; a URL no adapter can use says
/// which forms they accept.
pub async fn a_database_the_server_lacks_is_a_config_error(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let spec = ConnectSpec::new(format!("redis://127.0.0.1:{}/99", server.port()));
    let err = fails_in_time(connect, spec).await;
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{}", err.chain());
    assert!(!err.is_retryable(), "{}", err.chain());
    let err = fails_in_time(connect, ConnectSpec::new("http://localhost")).await;
    let said = err.chain().to_string();
    assert!(
        said.contains("redis+cluster://") && said.contains("redis+sentinel://"),
        "the accepted forms are listed: {said}"
    );
}
