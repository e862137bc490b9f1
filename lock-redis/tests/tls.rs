//! TLS (`rediss://`) with certificates the test generates: locks work over it, and a
//! wrong setup is a typed error within the connect timeout.
#![cfg(feature = "tls")]
// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lock_core::ErrorKind;
use lock_redis::Connector;
use lock_testkit::RedisServer;
use tokio::time::Instant;

/// A CA and a server certificate for 127.0.0.1, made with the openssl command.
fn certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("the openssl command (apt-get install openssl)");
        assert!(status.success(), "openssl {args:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=lock-test-ca",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "1",
        "-extfile",
        "ext.cnf",
    ]);
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "lock-redis-tls-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server with a plain port (the testkit's) and a TLS port.
async fn tls_server(dir: &Path) -> (RedisServer, u16) {
    let tls_port = free_port();
    let file = |name: &str| dir.join(name).display().to_string();
    let server = RedisServer::builder()
        .config_line(format!("tls-port {tls_port}"))
        .config_line(format!("tls-cert-file {}", file("server.crt")))
        .config_line(format!("tls-key-file {}", file("server.key")))
        .config_line(format!("tls-ca-cert-file {}", file("ca.crt")))
        .config_line("tls-auth-clients no")
        .start()
        .await;
    (server, tls_port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_over_tls_and_a_wrong_setup_is_a_typed_error() {
    let dir = scratch();
    certificates(&dir);
    let ca = std::fs::read(dir.join("ca.crt")).unwrap();
    let (server, tls_port) = tls_server(&dir).await;
    let url = format!("rediss://127.0.0.1:{tls_port}");

    let connect = |url: String, ca: Option<Vec<u8>>| {
        let connector = Connector::new(url).connect_timeout(Duration::from_secs(2));
        let connector = match ca {
            Some(ca) => connector.root_certificate(ca),
            None => connector,
        };
        connector.locks()
    };
    let a = connect(url.clone(), Some(ca.clone())).await.unwrap();
    let b = connect(url.clone(), Some(ca.clone())).await.unwrap();
    let held = a.mutex("tls:m").lock().await.unwrap();
    let waiter = {
        let m = b.mutex("tls:m");
        tokio::spawn(async move { m.lock().await.map(drop) })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter is woken over TLS")
        .unwrap()
        .unwrap();

    // An untrusted server certificate.
    let started = Instant::now();
    let err = connect(url, None)
        .await
        .expect_err("the test CA is not a system root");
    assert!(
        matches!(err.kind(), ErrorKind::Connection | ErrorKind::InvalidConfig),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));

    // TLS to the plain port.
    let started = Instant::now();
    let plain = format!("rediss://127.0.0.1:{}", server.port());
    let err = connect(plain, Some(ca)).await.expect_err("no TLS there");
    assert!(
        matches!(err.kind(), ErrorKind::Connection | ErrorKind::InvalidConfig),
        "{err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(dir);
}
