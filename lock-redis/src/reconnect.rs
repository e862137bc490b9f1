//! The script connection to one server: a multiplexed connection, replaced when it breaks.
//!
//! redis-rs's `ConnectionManager` does the same, but every call there clones and polls a
//! shared future and boxes its own: about a tenth of the client's instructions for a
//! lock/unlock pair, which sends two commands. Here a call copies the current connection
//! out of a `watch` channel and sends on it. Only a call that finds the connection broken
//! waits for the next one, and never longer than the response timeout: together with the
//! connection's own response timeout, that bounds every call (see
//! [`Reconnecting::send`]).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use lock_core::Error;
use lock_core::metrics::{self, Connection};
use lock_core::throttle::Throttle;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, RedisError, RedisResult, Value};
use tokio::sync::watch;

/// A multiplexed connection to one server that reconnects when it breaks. Clones share
/// the connection.
#[derive(Clone)]
pub(crate) struct Reconnecting {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Reconnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &*self.shared.link.borrow() {
            Link::Up { .. } => "up",
            Link::Connecting => "connecting",
            Link::Down { .. } => "down",
        };
        f.debug_struct("Reconnecting")
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

struct Shared {
    client: redis::Client,
    connect_timeout: Duration,
    response_timeout: Duration,
    link: watch::Sender<Link>,
}

/// Where the connection stands. `generation` counts the connections made so far, so that
/// news of a broken connection never tears down its successor.
#[derive(Clone)]
enum Link {
    Up {
        connection: MultiplexedConnection,
        generation: u64,
    },
    /// A new connection is being made.
    Connecting,
    /// The last attempt failed (said why); the next call tries again.
    Down { generation: u64, why: Arc<str> },
}

impl Reconnecting {
    /// Connects to `client`'s server. Calls wait at most `response_timeout` for a reply,
    /// connections at most `connect_timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a connection being made is closed when the future is dropped.
    pub(crate) async fn connect(
        client: redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Self, Error> {
        let shared = Arc::new(Shared {
            client,
            connect_timeout,
            response_timeout,
            link: watch::Sender::new(Link::Connecting),
        });
        match shared.open().await {
            Ok(connection) => {
                shared.link.send_replace(Link::Up {
                    connection,
                    generation: 1,
                });
                Ok(Self { shared })
            }
            Err(Opening::Refused(err)) => Err(crate::error::connection("connecting", err)),
            Err(Opening::TimedOut(elapsed)) => Err(Error::connection("connecting", elapsed)),
        }
    }

    /// Sends `command` and returns its reply; a server error reply is an `Err`.
    ///
    /// Bounded by the response timeout: the connection's own timeout covers the request
    /// and its reply, and a call that finds the connection broken waits at most that long
    /// for a new one (an error if it is not there by then). A command is never sent twice.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped call may or may not have reached the server.
    pub(crate) async fn send(&self, command: &Cmd) -> RedisResult<Value> {
        let (mut connection, generation) = self.connection().await?;
        let result = connection.send_packed_command(command).await;
        self.after(result.as_ref().err(), generation);
        result?.extract_error()
    }

    /// Sends `pipeline` in one write and returns its replies, bounded like
    /// [`Reconnecting::send`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped call may or may not have reached the server.
    pub(crate) async fn send_pipeline<T: redis::FromRedisValue>(
        &self,
        pipeline: &redis::Pipeline,
    ) -> RedisResult<T> {
        let (mut connection, generation) = self.connection().await?;
        let result = pipeline.query_async(&mut connection).await;
        self.after(result.as_ref().err(), generation);
        result
    }

    /// The current connection, or the next one if it is broken (waiting at most the
    /// response timeout for it).
    async fn connection(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        if let Link::Up {
            connection,
            generation,
        } = &*self.shared.link.borrow()
        {
            return Ok((connection.clone(), *generation));
        }
        // Boxed: every call's future would otherwise carry room for the wait.
        Box::pin(self.reconnected()).await
    }

    /// Starts a new connection unless one is being made, and waits for the outcome.
    async fn reconnected(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        let mut changes = self.shared.link.subscribe();
        let mut failed = None;
        self.shared.link.send_if_modified(|link| match link {
            Link::Down { generation, .. } => {
                failed = Some(*generation);
                *link = Link::Connecting;
                true
            }
            Link::Up { .. } | Link::Connecting => false,
        });
        if let Some(generation) = failed {
            Shared::reconnect_in_background(&self.shared, generation);
        }
        let settled = changes.wait_for(|link| !matches!(link, Link::Connecting));
        match tokio::time::timeout(self.shared.response_timeout, settled).await {
            Ok(Ok(link)) => match &*link {
                Link::Up {
                    connection,
                    generation,
                } => Ok((connection.clone(), *generation)),
                Link::Down { why, .. } => {
                    Err(not_connected(&format!("reconnecting failed: {why}")))
                }
                Link::Connecting => Err(not_connected("still reconnecting")),
            },
            Ok(Err(_closed)) => Err(not_connected("the connection was closed")),
            Err(_elapsed) => Err(not_connected(
                "reconnecting to the server took longer than the response timeout",
            )),
        }
    }

    /// After a call on connection `generation`: an error that means the connection is
    /// gone (a dropped connection is one of them) starts a new one, and so does a reply
    /// that did not come within the response timeout. That connection is not trusted
    /// again: whatever stalls it (a paused path, a full buffer) would stall every
    /// request sent again on it, and its queued requests may still be delivered late.
    fn after(&self, error: Option<&RedisError>, generation: u64) {
        if error.is_some_and(|err| err.is_unrecoverable_error() || err.is_timeout()) {
            Shared::broke(&self.shared, generation);
        }
    }
}

/// Why making a connection failed.
enum Opening {
    Refused(RedisError),
    TimedOut(tokio::time::error::Elapsed),
}

impl std::fmt::Display for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(err) => write!(f, "{err}"),
            Self::TimedOut(_) => f.write_str("no connection within the connect timeout"),
        }
    }
}

impl Shared {
    /// Makes a connection. (A driver that told of a closed connection at once would let
    /// a new one be made before the next call, but redis-rs tells only RESP3
    /// connections; here the first call after the loss fails and starts the new one.)
    async fn open(&self) -> Result<MultiplexedConnection, Opening> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout));
        let connecting = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(Ok(connection)) => Ok(connection),
            Ok(Err(err)) => Err(Opening::Refused(err)),
            Err(elapsed) => Err(Opening::TimedOut(elapsed)),
        }
    }

    /// Connection `generation` is gone: start the next one, unless that happened already.
    fn broke(self: &Arc<Self>, generation: u64) {
        let current = self.link.send_if_modified(|link| match link {
            Link::Up { generation: g, .. } if *g == generation => {
                *link = Link::Connecting;
                true
            }
            _ => false,
        });
        if current {
            metrics::connection_lost(Connection::Commands);
            Self::reconnect_in_background(self, generation);
        }
    }

    /// Makes connection `generation + 1` in a task of its own (the link says
    /// `Connecting`): its callers may give up waiting for it, and the next caller should
    /// find it ready.
    fn reconnect_in_background(self: &Arc<Self>, generation: u64) {
        let shared = Arc::clone(self);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to connect on: the next call, which runs on one, tries again.
            self.link.send_replace(Link::Down {
                generation,
                why: "no runtime to reconnect on".into(),
            });
            return;
        };
        runtime.spawn(async move {
            let next = match shared.open().await {
                Ok(connection) => {
                    metrics::reconnected(Connection::Commands);
                    Link::Up {
                        connection,
                        generation: generation + 1,
                    }
                }
                Err(err) => {
                    static THROTTLE: Throttle = Throttle::new(Duration::from_secs(5));
                    let why: Arc<str> = err.to_string().into();
                    if let Some(held_back) = THROTTLE.admit() {
                        tracing::warn!(
                            target: crate::EVENTS_TARGET,
                            error = %why,
                            held_back,
                            "reconnecting the script connection failed; the next call tries again (one warning every 5 s)"
                        );
                    }
                    Link::Down { generation, why }
                }
            };
            shared.link.send_replace(next);
        });
    }
}

/// The error of a call that found no connection.
fn not_connected(why: &str) -> RedisError {
    RedisError::from(io::Error::new(io::ErrorKind::NotConnected, why.to_owned()))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Instant;

    use lock_testkit::{FaultProxy, ProxyFault, RedisServer};

    use super::*;

    const RESPONSE: Duration = Duration::from_millis(300);
    const CONNECT: Duration = Duration::from_secs(1);

    async fn through_proxy(server: &RedisServer) -> (FaultProxy, Reconnecting) {
        let upstream: SocketAddr = format!("127.0.0.1:{}", server.port())
            .parse()
            .expect("an address");
        let proxy = FaultProxy::start(upstream).await;
        let client = redis::Client::open(proxy.url()).expect("a client");
        let connection = Reconnecting::connect(client, CONNECT, RESPONSE)
            .await
            .expect("connect");
        (proxy, connection)
    }

    fn echo(word: &str) -> Cmd {
        let mut command = redis::cmd("ECHO");
        command.arg(word);
        command
    }

    fn state(connection: &Reconnecting) -> String {
        format!("{connection:?}")
    }

    /// A connection whose socket was reset is replaced: the call that met the reset
    /// fails (its command may have run), the next one goes through a new connection.
    #[tokio::test]
    async fn a_reset_connection_is_replaced() {
        let server = RedisServer::start().await;
        let (proxy, connection) = through_proxy(&server).await;
        assert_eq!(
            connection.send(&echo("before")).await.expect("echo"),
            Value::BulkString(b"before".to_vec())
        );
        proxy.set(ProxyFault::LoseReplyTo(b"lost".to_vec()));
        let lost = connection.send(&echo("lost")).await;
        assert!(
            lost.as_ref().is_err_and(RedisError::is_connection_dropped),
            "a reset connection is a dropped connection: {lost:?}"
        );
        assert_eq!(proxy.lost_replies(), 1);
        assert_eq!(
            connection.send(&echo("after")).await.expect("echo"),
            Value::BulkString(b"after".to_vec())
        );
        assert!(state(&connection).contains("up"), "{}", state(&connection));
    }

    /// While a new connection cannot be made (a black hole answers nothing, so the
    /// driver's handshake hangs for the connect timeout), a call fails after the
    /// response timeout, not the connect timeout; once the network is back, calls go
    /// through again.
    #[tokio::test]
    async fn a_call_waits_for_a_reconnection_no_longer_than_the_response_timeout() {
        let server = RedisServer::start().await;
        let (proxy, connection) = through_proxy(&server).await;
        proxy.set(ProxyFault::LoseReplyTo(b"lost".to_vec()));
        assert!(connection.send(&echo("lost")).await.is_err());
        proxy.set(ProxyFault::BlackHole);
        // The reset left the connection broken; this call starts the new one and waits.
        let started = Instant::now();
        let waited = connection.send(&echo("waits")).await;
        let took = started.elapsed();
        assert!(waited.is_err(), "nothing can answer: {waited:?}");
        assert!(
            took >= RESPONSE.saturating_sub(Duration::from_millis(20)) && took < CONNECT,
            "a call during a reconnection took {took:?}, the response timeout is {RESPONSE:?}"
        );
        assert!(
            state(&connection).contains("connecting"),
            "{}",
            state(&connection)
        );
        proxy.set(ProxyFault::Forward);
        // The hanging attempt ends at the connect timeout; a call after it tries again.
        let deadline = Instant::now() + CONNECT * 5;
        loop {
            if let Ok(reply) = connection.send(&echo("back")).await {
                assert_eq!(reply, Value::BulkString(b"back".to_vec()));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no new connection after the fault"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A server error is the call's error, and leaves the connection as it is.
    #[tokio::test]
    async fn a_server_error_is_an_error_and_keeps_the_connection() {
        let server = RedisServer::start().await;
        let client = redis::Client::open(server.url()).expect("a client");
        let connection = Reconnecting::connect(client, CONNECT, RESPONSE)
            .await
            .expect("connect");
        let refused = connection.send(&redis::cmd("NOSUCHCOMMAND")).await;
        assert!(
            refused.as_ref().is_err_and(|err| err.code() == Some("ERR")),
            "{refused:?}"
        );
        assert!(state(&connection).contains("up"), "{}", state(&connection));
        assert_eq!(
            connection.send(&echo("still")).await.expect("echo"),
            Value::BulkString(b"still".to_vec())
        );
    }
}
