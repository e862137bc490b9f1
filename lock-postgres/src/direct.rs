//! The query pool's connections, and whether its statements may be prepared.
//!
//! A prepared statement saves the server the parse and plan of every call (a fifth of a
//! lock call's server time), but it lives in one server session. Behind a
//! transaction-mode pooler the statements of one client connection may run in different
//! sessions, where a statement prepared in one is unknown, or another statement, in the
//! next. So the pool prepares statements only while every connection it opened was
//! proved to be a session of the server itself: [`DirectConnect`] opens the TCP
//! connection, remembers both of the socket's ends, and compares them with the ends the
//! server saw (`inet_client_addr()`, `inet_client_port()`, `inet_server_addr()`,
//! `inet_server_port()`). Through a pooler or a proxy the server sees the proxy's socket
//! instead, and no two live TCP connections share both ends. (The local end alone is not
//! enough: a host gives one local port to two connections to different peers, so a
//! pooler on this host may reach the server from the very port this client reached the
//! pooler from.) A Unix socket, several hosts, a `hostaddr` or a
//! `target_session_attrs` prove nothing (tokio-postgres connects those itself), and one
//! connection that proves nothing turns preparing off for the pool, for good.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::Connect;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_postgres::config::{Host, TargetSessionAttrs};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config};

use crate::tls::{MakeTls, another};

/// A connection the pool opened, or why it could not.
type Connected = Result<(Client, JoinHandle<()>), tokio_postgres::Error>;

/// Whether the pool's statements are prepared: yes until a connection could not be
/// proved to be the server's own session.
#[derive(Debug, Clone)]
pub(crate) struct Preparing(Arc<AtomicBool>);

impl Preparing {
    /// Preparing, unless `config` is one that cannot be proved (see the module docs).
    fn for_config(config: &Config) -> Self {
        Self(Arc::new(AtomicBool::new(provable(config).is_some())))
    }

    /// Whether statements may be prepared on a connection the pool handed out. Read after
    /// the connection was taken from the pool: a connection that proved nothing turned
    /// preparing off before the pool could hand it out.
    pub(crate) fn allowed(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Turns preparing off for good, saying why once.
    fn stop(&self, why: &str) {
        if self.0.swap(false, Ordering::AcqRel) {
            tracing::info!(
                "distlock: PostgreSQL statements are sent unprepared from now on: {why}"
            );
        }
    }
}

/// The host and port of a config whose connection can be proved direct: one TCP host
/// name or address, no `hostaddr`, any session.
fn provable(config: &Config) -> Option<(String, u16)> {
    let [Host::Tcp(host)] = config.get_hosts() else {
        return None;
    };
    let port = match config.get_ports() {
        [] => 5432,
        [port] => *port,
        _ => return None,
    };
    let any_session = matches!(config.get_target_session_attrs(), TargetSessionAttrs::Any);
    (config.get_hostaddrs().is_empty() && any_session).then(|| (host.clone(), port))
}

/// Opens the pool's connections, proving each to be the server's own session where it
/// can (see the module docs).
pub(crate) struct DirectConnect {
    tls: MakeTls,
    preparing: Preparing,
}

impl std::fmt::Debug for DirectConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectConnect")
            .field("preparing", &self.preparing.allowed())
            .finish_non_exhaustive()
    }
}

impl DirectConnect {
    /// The pool's connect for connections to `config`, and the flag it keeps.
    pub(crate) fn new(config: &Config, tls: MakeTls) -> (Self, Preparing) {
        let preparing = Preparing::for_config(config);
        let connect = Self {
            tls,
            preparing: preparing.clone(),
        };
        (connect, preparing)
    }

    /// Connects as tokio-postgres does, for a config that proves nothing.
    async fn connect_unproved(&self, config: &Config) -> Connected {
        let (client, connection) = config.connect(another(&self.tls)).await?;
        Ok((client, drive(connection)))
    }

    /// Opens the TCP connection to `host`:`port` itself, as tokio-postgres would, and
    /// returns the client with the socket's two ends.
    async fn connect_proving(
        &self,
        config: &Config,
        host: &str,
        port: u16,
    ) -> Option<Result<(Client, JoinHandle<()>, Ends), tokio_postgres::Error>> {
        let connecting = TcpStream::connect((host, port));
        let stream = match config.get_connect_timeout() {
            Some(timeout) => tokio::time::timeout(*timeout, connecting).await.ok()?,
            None => connecting.await,
        }
        .ok()?;
        let ends = Ends {
            local: stream.local_addr().ok()?,
            peer: stream.peer_addr().ok()?,
        };
        configure(&stream, config).ok()?;
        let mut tls = another(&self.tls);
        let tls = MakeTlsConnect::<TcpStream>::make_tls_connect(&mut tls, host).ok()?;
        Some(
            config
                .connect_raw(stream, tls)
                .await
                .map(|(client, connection)| (client, drive(connection), ends)),
        )
    }
}

impl Connect for DirectConnect {
    fn connect(&self, config: &Config) -> Pin<Box<dyn Future<Output = Connected> + Send + '_>> {
        let config = config.clone();
        Box::pin(async move {
            let Some((host, port)) = provable(&config).filter(|_| self.preparing.allowed()) else {
                return self.connect_unproved(&config).await;
            };
            let Some(connected) = self.connect_proving(&config, &host, port).await else {
                // The socket could not be opened or set up here; tokio-postgres's own
                // connect gives the error it would have given (or a connection that
                // proves nothing).
                let connected = self.connect_unproved(&config).await?;
                self.preparing
                    .stop("a connection was opened without its socket's address");
                return Ok(connected);
            };
            let (client, driver, ends) = connected?;
            // One unnamed statement: a named one could be lost behind a pooler, the
            // very case this asks about.
            let rows = client
                .query_typed(
                    "SELECT pg_catalog.host(pg_catalog.inet_client_addr()), \
                            pg_catalog.inet_client_port(), \
                            pg_catalog.host(pg_catalog.inet_server_addr()), \
                            pg_catalog.inet_server_port()",
                    &[],
                )
                .await?;
            let end = |row: &tokio_postgres::Row, at: usize| {
                let ip = row.try_get::<_, Option<String>>(at).ok()??;
                let port = row.try_get::<_, Option<i32>>(at + 1).ok()??;
                Some((ip.parse::<IpAddr>().ok()?, port))
            };
            let seen = rows
                .first()
                .and_then(|row| Some((end(row, 0)?, end(row, 2)?)));
            if !seen.is_some_and(|seen| ends.are(seen)) {
                self.preparing.stop(&format!(
                    "the server saw this connection as {seen:?}, not as {ends:?}: a pooler \
                     or proxy is in between"
                ));
            }
            Ok((client, driver))
        })
    }
}

/// A TCP connection's two ends, as this client's socket has them.
#[derive(Debug, Clone, Copy)]
struct Ends {
    local: SocketAddr,
    peer: SocketAddr,
}

impl Ends {
    /// Whether the server's view of its session's connection, (client end, server end),
    /// is this socket's.
    fn are(&self, (client, server): ((IpAddr, i32), (IpAddr, i32))) -> bool {
        let same = |(ip, port): (IpAddr, i32), end: SocketAddr| {
            ip.to_canonical() == end.ip().to_canonical() && port == i32::from(end.port())
        };
        same(client, self.local) && same(server, self.peer)
    }
}

/// Sets up the socket as tokio-postgres sets up its own: no delay, the config's
/// keepalives and user timeout.
fn configure(stream: &TcpStream, config: &Config) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let socket = socket2::SockRef::from(stream);
    #[cfg(target_os = "linux")]
    if let Some(timeout) = config.get_tcp_user_timeout() {
        socket.set_tcp_user_timeout(Some(*timeout))?;
    }
    if config.get_keepalives() {
        let mut keepalive = socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
        #[cfg(not(target_os = "openbsd"))]
        if let Some(interval) = config.get_keepalives_interval() {
            keepalive = keepalive.with_interval(interval);
        }
        #[cfg(not(any(target_os = "openbsd", target_os = "windows")))]
        if let Some(retries) = config.get_keepalives_retries() {
            keepalive = keepalive.with_retries(retries);
        }
        socket.set_tcp_keepalive(&keepalive)?;
    }
    Ok(())
}

/// Runs a connection's I/O in a task of its own, reporting how it ended.
fn drive<S, T>(connection: tokio_postgres::Connection<S, T>) -> JoinHandle<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(err) = connection.await {
            tracing::debug!(error = %err, "distlock: a PostgreSQL query connection ended");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(url: &str) -> Config {
        url.parse().expect("a test URL")
    }

    // Would fail if only the local end were compared: a pooler on this host reached the
    // server from the local port this client reached the pooler from.
    #[test]
    fn a_pooler_that_shares_our_local_port_proves_nothing() {
        let localhost: IpAddr = "127.0.0.1".parse().expect("an address");
        let ends = Ends {
            local: SocketAddr::new(localhost, 40_000),
            peer: SocketAddr::new(localhost, 6432),
        };
        assert!(ends.are(((localhost, 40_000), (localhost, 6432))));
        assert!(!ends.are(((localhost, 40_000), (localhost, 5432))));
        assert!(!ends.are(((localhost, 40_001), (localhost, 6432))));
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().expect("an address");
        assert!(ends.are(((mapped, 40_000), (mapped, 6432))));
    }

    #[test]
    fn only_one_tcp_host_can_be_proved() {
        assert_eq!(
            provable(&config("postgres://u@db.example:6432/x")),
            Some(("db.example".to_owned(), 6432))
        );
        assert_eq!(
            provable(&config("postgres://u@127.0.0.1/x")),
            Some(("127.0.0.1".to_owned(), 5432))
        );
        for unprovable in [
            "postgres://u@a,b/x",
            "postgres://u@%2Frun%2Fpostgresql/x",
            "postgres://u@a/x?hostaddr=10.0.0.1",
            "postgres://u@a/x?target_session_attrs=read-write",
        ] {
            assert_eq!(provable(&config(unprovable)), None, "{unprovable}");
        }
    }
}
