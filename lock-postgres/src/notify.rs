//! Waiting by LISTEN/NOTIFY: one dedicated connection per client carries every channel
//! its waiters listen on (lock-core's [`Subscriptions`] shares one LISTEN per channel
//! among them).
//!
//! When that connection breaks (the server restarted, `pg_terminate_backend`, a network
//! fault), a task connects again with a growing pause, listens to every channel again, and
//! wakes every waiter, so that waiters re-poll instead of sleeping through a release whose
//! NOTIFY was lost with the old connection.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::notify::{Handed, LINGER, Listener, PubSub, ReaderTask, Subscriptions, Wake};
use lock_core::{Error, Pauses};
use tokio::sync::watch;
use tokio_postgres::{AsyncMessage, Client, Config};

use crate::error::{refused_login, refuses_the_login};
use crate::timeouts::{DEFAULT_CONNECT_TIMEOUT, silent};
use crate::tls::{MakeTls, TlsStream, Trust, another};

/// The application name of the notification connection, as `pg_stat_activity` shows it.
pub const APPLICATION_NAME: &str = "distlock-notifications";

/// The payload of a notification that one waiter can use (a mutex released); a
/// hand-over (`handed:...`, see `hand_over` in the functions) tells the one waiter it
/// names, and any other payload wakes every waiter of the channel.
pub const WAKE_ONE: &str = "one";

/// The first pause before connecting again, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// The LISTEN side: LISTEN and UNLISTEN through the current notification connection.
#[derive(Default)]
struct Listening {
    client: Mutex<Option<Arc<Client>>>,
}

impl fmt::Debug for Listening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listening")
            .field("connected", &self.current().is_some())
            .finish()
    }
}

impl Listening {
    fn current(&self) -> Option<Arc<Client>> {
        self.client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, client: Option<Arc<Client>>) {
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = client;
    }

    async fn send(&self, statement: &str, during: &'static str) -> Result<(), Error> {
        let client = self.current().ok_or_else(|| {
            Error::connection(during, std::io::Error::other("no notification connection"))
        })?;
        client
            .batch_execute(statement)
            .await
            .map_err(|err| Error::connection(during, err))
    }
}

#[async_trait]
impl PubSub for Listening {
    async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        self.send(
            &format!("LISTEN {}", quoted(channel)),
            "listening for releases",
        )
        .await
    }

    async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        self.send(&format!("UNLISTEN {}", quoted(channel)), "unlistening")
            .await
    }
}

/// A channel name as an SQL identifier.
fn quoted(channel: &str) -> String {
    format!("\"{}\"", channel.replace('"', "\"\""))
}

/// The notification side of one client: its registry of channels and the task that
/// keeps the dedicated connection. Dropping it ends the task and closes the connection.
#[derive(Debug)]
pub struct Notifications {
    subscriptions: Subscriptions,
    /// The task that keeps the connection, started again on a waiter's runtime after it
    /// died with its own (second review, N8).
    reader: ReaderTask,
    /// Dropped with `self`: the task ends when it sees that.
    _alive: watch::Sender<()>,
}

impl Notifications {
    /// Opens the notification connection to the server `config` names and starts the
    /// task that keeps it. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](lock_core::ErrorKind::Connection) when the first
    /// connection fails.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: nothing is started before the connection is up.
    pub async fn connect(config: Config) -> Result<Self, Error> {
        let tls = Trust::default().make_tls(&[&config])?;
        Self::connect_with(config, tls).await
    }

    /// As [`Self::connect`], with connections made by `tls`.
    pub(crate) async fn connect_with(mut config: Config, tls: MakeTls) -> Result<Self, Error> {
        config.application_name(APPLICATION_NAME);
        let (client, connection) = connect_within(&config, &tls)
            .await
            .map_err(|failure| failure.into_error("opening the notification connection"))?;
        let listening = Arc::new(Listening::default());
        listening.set(Some(Arc::new(client)));
        // A lingering channel spares a waiter that comes back within it an `UNLISTEN`, a
        // `LISTEN` and an acquire statement on the name (it asks once, listening).
        let subscriptions =
            Subscriptions::lingering(Arc::clone(&listening) as Arc<dyn PubSub>, LINGER);
        let (alive, watched) = watch::channel(());
        let kept = Kept {
            config,
            tls,
            listening,
            subscriptions: subscriptions.clone(),
            alive: watched,
        };
        let first = kept.clone().run(Some(connection));
        let reader = ReaderTask::spawn(first, move || {
            // The old connection died with its runtime: nobody LISTENs through it.
            kept.listening.set(None);
            kept.clone().run(None)
        });
        Ok(Self {
            subscriptions,
            reader,
            _alive: alive,
        })
    }

    /// Registers a listener on `channel`, with the notification connection kept.
    ///
    /// # Errors
    ///
    /// As [`Subscriptions::listen`]; [`Error::NoRuntime`] outside a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`Subscriptions::listen`].
    pub async fn listen(&self, channel: &str) -> Result<Listener, Error> {
        self.reader.ensure_running()?;
        self.subscriptions.listen(channel).await
    }

    /// A listener on `channel` without a request, when the channel is subscribed
    /// already (see [`Subscriptions::listening`]).
    pub(crate) fn listening(&self, channel: &str) -> Option<Listener> {
        self.reader.ensure_running().ok()?;
        self.subscriptions.listening(channel)
    }

    /// The registry waiters listen through.
    #[must_use]
    pub fn subscriptions(&self) -> &Subscriptions {
        &self.subscriptions
    }
}

/// What the connection task keeps.
#[derive(Clone)]
struct Kept {
    config: Config,
    tls: MakeTls,
    listening: Arc<Listening>,
    subscriptions: Subscriptions,
    alive: watch::Receiver<()>,
}

type Connection = tokio_postgres::Connection<tokio_postgres::Socket, TlsStream>;

impl Kept {
    /// Delivers notifications until the connection ends, connects again, and so on,
    /// until the [`Notifications`] is dropped. Without a `connection` (a task started
    /// again after its runtime shut down) it connects first.
    async fn run(mut self, connection: Option<Connection>) {
        let mut connection = match connection {
            Some(connection) => connection,
            None => match self.reopen().await {
                Some(connection) => connection,
                None => return,
            },
        };
        loop {
            if !self.deliver(&mut connection).await {
                return;
            }
            match self.reopen().await {
                Some(reconnected) => connection = reconnected,
                None => return,
            }
        }
    }

    /// Connects again and LISTENs every channel again, then wakes every waiter to
    /// re-poll; `None` once the owner is gone.
    async fn reopen(&mut self) -> Option<Connection> {
        self.listening.set(None);
        self.subscriptions.connection_lost();
        let connection = self.reconnect().await?;
        self.subscriptions.reconnected();
        Some(connection)
    }

    /// Delivers what `connection` receives until it ends; false once the owner is gone.
    async fn deliver(&mut self, connection: &mut Connection) -> bool {
        loop {
            let message = tokio::select! {
                message = std::future::poll_fn(|cx| connection.poll_message(cx)) => message,
                _ = self.alive.changed() => return false,
            };
            match message {
                Some(Ok(AsyncMessage::Notification(notification))) => {
                    self.notified(notification.channel(), notification.payload());
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    tracing::warn!(
                        target: lock_core::TRACING_TARGET,
                        error = %err,
                        "the notification connection to PostgreSQL broke; reconnecting"
                    );
                    return true;
                }
                None => return true,
            }
        }
    }

    /// Delivers one notification: a hand-over to the waiter it names (the one waiter of
    /// its channel that can use it is woken, and holds from now on), `one` to one
    /// waiter, anything else to every waiter of the channel.
    fn notified(&self, channel: &str, payload: &str) {
        let handed = payload
            .strip_prefix(Handed::PREFIX)
            .and_then(Handed::from_message);
        match handed {
            Some((handed, "")) => self
                .subscriptions
                .deliver_handed(channel, handed, Wake::One),
            _ if payload == WAKE_ONE || payload.starts_with(Handed::PREFIX) => {
                self.subscriptions.deliver(channel, Wake::One);
            }
            _ => self.subscriptions.deliver(channel, Wake::All),
        }
    }

    /// Connects again, pausing longer after each failure; `None` once the owner is gone.
    async fn reconnect(&mut self) -> Option<Connection> {
        let mut pauses = Pauses::doubling(FIRST_PAUSE, LONGEST_PAUSE);
        loop {
            let connected = tokio::select! {
                connected = connect_within(&self.config, &self.tls) => connected,
                _ = self.alive.changed() => return None,
            };
            match connected {
                Ok((client, connection)) => {
                    self.listening.set(Some(Arc::new(client)));
                    return Some(connection);
                }
                Err(failure) => tracing::warn!(
                    target: lock_core::TRACING_TARGET,
                    error = %failure,
                    "the notification connection to PostgreSQL failed; trying again"
                ),
            }
            tokio::select! {
                () = tokio::time::sleep(pauses.next().unwrap_or(LONGEST_PAUSE)) => {}
                _ = self.alive.changed() => return None,
            }
        }
    }
}

/// Why a notification connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// The server refused the login (a configuration error, already classified).
    #[error(transparent)]
    Refused(Error),
    /// The driver failed (refused, reset, a TLS or protocol error).
    #[error(transparent)]
    Driver(tokio_postgres::Error),
    /// The server said nothing within the connect timeout.
    #[error("no answer within the connect timeout")]
    /// No answer within the connect timeout, this long.
    Silent(Duration),
}

impl Failure {
    /// The failure as the crate's error: a refused login as it was classified, the rest
    /// connection errors.
    pub(crate) fn into_error(self, during: &'static str) -> Error {
        match self {
            Self::Refused(err) => err,
            Self::Driver(err) => Error::connection(during, err),
            Self::Silent(bound) => Error::connection(during, silent("connect timeout", bound)),
        }
    }
}

/// Connects within the config's connect timeout (the driver bounds only the TCP
/// connection with it; a paused server would hold the handshake forever).
pub(crate) async fn connect_within(
    config: &Config,
    tls: &MakeTls,
) -> Result<(Client, Connection), Failure> {
    let bound = config
        .get_connect_timeout()
        .copied()
        .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
    match tokio::time::timeout(bound, config.connect(another(tls))).await {
        Ok(Ok(connected)) => Ok(connected),
        Ok(Err(err)) if err.as_db_error().is_some_and(refuses_the_login) => {
            Err(Failure::Refused(refused_login(err)))
        }
        Ok(Err(err)) => Err(Failure::Driver(err)),
        Err(_) => Err(Failure::Silent(bound)),
    }
}
