//! Waiting without polling: each client's mailbox, and the connection that reads it.
//!
//! MySQL has no LISTEN/NOTIFY. A client keeps one connection that runs, over and over,
//! a statement that returns at once when its mailbox (rows of the wakes table under the
//! client's key) holds a notice, and otherwise sleeps for a few seconds. A transaction
//! that hands a lock over (or frees it for a waiter) writes the waiter's notice into its
//! client's mailbox and, once committed, interrupts that statement with `KILL QUERY`.
//! The listening connection holds a user-level lock named after the mailbox
//! (`GET_LOCK`), and `IS_USED_LOCK` tells the releasing transaction which connection
//! that is now: a client that went away, or reconnected, is never mistaken for another
//! session.
//! The client then reads its mailbox and wakes the waiter. A notice committed while the
//! statement is not running is found by the next one: it checks the mailbox first, in
//! the same statement, so no interruption between the two can be missed.
//!
//! `KILL QUERY` of another session needs the same database user (or the
//! `CONNECTION ADMIN` privilege) and the connection id as the server numbers it (not a
//! proxy's). Where either is missing, no statement is interrupted: a waiter then asks
//! again when its wait says (a third of its place at the latest), and nothing else
//! changes.
//!
//! When the connection breaks, a task connects again with a growing pause and wakes every
//! waiter, so that waiters ask again instead of sleeping through a notice written while
//! nobody read the mailbox.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::RequestId;
use lock_core::notify::{
    Handed, InProcess, LINGER, Listener, PubSub, ReaderTask, Subscriptions, Wake,
};
use lock_core::{Error, Pauses};
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, Row};
use tokio::sync::watch;

use crate::backend::READ_WRITE_CHANNEL;
use crate::error::code;
use crate::mailbox::Mailbox;
use crate::pool::connect;
use crate::schema::{Tables, hex};

/// How long the listening statement sleeps when nothing interrupts it.
const NAP: Duration = Duration::from_secs(5);

/// How often the mailboxes of clients that went away are emptied (by whichever client
/// listens): a notice older than this is read by nobody.
const SWEEP: Duration = Duration::from_secs(60);

/// The first pause before connecting again, and the longest.
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// The notification side of one client: its mailbox, its registry of waiters, and the
/// task that keeps the listening connection. Dropping it ends the task.
#[derive(Debug)]
pub(crate) struct Notifications {
    subscriptions: Subscriptions,
    mailbox: Mailbox,
    reader: ReaderTask,
    _alive: watch::Sender<()>,
}

impl Notifications {
    /// Opens the listening connection and starts the task that keeps it.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: nothing is started before the connection is up.
    pub(crate) async fn connect(
        opts: Opts,
        tables: Tables,
        connect_timeout: Duration,
    ) -> Result<Self, Error> {
        let mailbox = Mailbox {
            key: RequestId::random(),
        };
        let lock_name = mailbox.lock_name();
        let conn = open(&opts, connect_timeout, &lock_name).await?;
        // A lingering channel spares a waiter that comes back within it an acquire
        // statement (it asks once, listening).
        let subscriptions =
            Subscriptions::lingering(Arc::new(InProcess) as Arc<dyn PubSub>, LINGER);
        let (alive, watched) = watch::channel(());
        let kept = Kept {
            opts,
            connect_timeout,
            statements: Statements::new(&tables, mailbox.key),
            lock_name,
            subscriptions: subscriptions.clone(),
            alive: watched,
        };
        let first = kept.clone().run(Some(conn));
        let reader = ReaderTask::spawn(first, move || kept.clone().run(None));
        Ok(Self {
            subscriptions,
            mailbox,
            reader,
            _alive: alive,
        })
    }

    /// Where this client's waiters are told of hand-overs now.
    pub(crate) fn mailbox(&self) -> Mailbox {
        self.mailbox
    }

    /// Registers a listener on `channel`, with the listening connection kept.
    pub(crate) async fn listen(&self, channel: &str) -> Result<Listener, Error> {
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
    pub(crate) fn subscriptions(&self) -> &Subscriptions {
        &self.subscriptions
    }
}

/// The statements of one mailbox.
#[derive(Debug, Clone)]
struct Statements {
    /// Returns at once when the mailbox holds a notice; sleeps otherwise.
    nap: String,
    read: String,
    /// Empties the mailbox up to a sequence number, appended.
    empty: String,
    sweep: String,
}

impl Statements {
    fn new(tables: &Tables, key: RequestId) -> Self {
        let (wakes, mailbox) = (tables.wakes(), hex(&key.to_bytes()));
        Self {
            nap: format!(
                "SELECT IF(EXISTS(SELECT 1 FROM {wakes} WHERE listener = {mailbox}), 0, SLEEP({}))",
                NAP.as_secs()
            ),
            read: format!(
                "SELECT seq, channel, handed, attempt, token FROM {wakes} \
                 WHERE listener = {mailbox} ORDER BY seq"
            ),
            empty: format!("DELETE FROM {wakes} WHERE listener = {mailbox} AND seq <= "),
            sweep: format!(
                "DELETE FROM {wakes} WHERE written < NOW(6) - INTERVAL {} SECOND LIMIT 1000",
                SWEEP.as_secs()
            ),
        }
    }
}

/// Whether the listening connection is still usable after a statement's `outcome`: it
/// answered, or a wake-up interrupted it. Otherwise the failure is reported, and the
/// caller connects again.
fn usable(
    outcome: Result<Result<(), mysql_async::Error>, tokio::time::error::Elapsed>,
    during: &str,
) -> bool {
    match outcome {
        Ok(Ok(())) => true,
        Ok(Err(mysql_async::Error::Server(err))) if err.code == code::INTERRUPTED => true,
        Ok(Err(err)) => {
            tracing::warn!(
                target: lock_core::TRACING_TARGET,
                error = %err,
                "the listening connection to MySQL failed {during}; reconnecting"
            );
            false
        }
        Err(_) => {
            tracing::warn!(
                target: lock_core::TRACING_TARGET,
                "the listening connection to MySQL did not answer {during}; reconnecting"
            );
            false
        }
    }
}

/// Opens the listening connection and takes the mailbox's user-level lock on it, by
/// which releasing transactions find it.
async fn open(opts: &Opts, bound: Duration, lock_name: &str) -> Result<Conn, Error> {
    let mut conn = connect(opts, bound).await?;
    let during = "taking the mailbox lock";
    let took = tokio::time::timeout(
        bound,
        conn.query_first::<Option<i64>, _>(format!("SELECT GET_LOCK('{lock_name}', 0)")),
    )
    .await
    .map_err(|_| Error::connection(during, crate::error::Silent { bound }))?
    .map_err(|err| crate::error::failed(err, during))?;
    if took != Some(Some(1)) {
        return Err(Error::backend(
            during,
            std::io::Error::other(format!("GET_LOCK('{lock_name}', 0) answered {took:?}")),
        ));
    }
    Ok(conn)
}

/// What the connection task keeps.
#[derive(Clone)]
struct Kept {
    opts: Opts,
    connect_timeout: Duration,
    statements: Statements,
    /// The user-level lock the listening connection holds.
    lock_name: String,
    subscriptions: Subscriptions,
    alive: watch::Receiver<()>,
}

impl Kept {
    /// Reads the mailbox until the connection ends, connects again, and so on, until the
    /// [`Notifications`] is dropped.
    async fn run(mut self, conn: Option<Conn>) {
        let mut conn = match conn {
            Some(conn) => conn,
            None => match self.reconnect().await {
                Some(conn) => conn,
                None => return,
            },
        };
        loop {
            if !self.read(&mut conn).await {
                return;
            }
            self.subscriptions.connection_lost();
            match self.reconnect().await {
                Some(reconnected) => conn = reconnected,
                None => return,
            }
            self.subscriptions.reconnected();
        }
    }

    /// Naps and reads the mailbox until the connection fails; false once the owner is
    /// gone.
    async fn read(&mut self, conn: &mut Conn) -> bool {
        let bound = NAP + self.connect_timeout;
        let mut swept = tokio::time::Instant::now();
        loop {
            let napped = tokio::select! {
                napped = tokio::time::timeout(bound, conn.query_drop(&self.statements.nap)) => napped,
                _ = self.alive.changed() => return false,
            };
            if !usable(napped, "napping") {
                return true;
            }
            // A wake-up meant for the nap may interrupt the reading: it is read again.
            if !usable(
                tokio::time::timeout(bound, self.empty(conn)).await,
                "reading the mailbox",
            ) {
                return true;
            }
            if swept.elapsed() >= SWEEP {
                swept = tokio::time::Instant::now();
                if let Err(err) = conn.query_drop(&self.statements.sweep).await {
                    tracing::warn!(
                        target: lock_core::TRACING_TARGET,
                        error = %err,
                        "emptying the mailboxes of clients that went away failed"
                    );
                }
            }
        }
    }

    /// Reads the notices in the mailbox, delivers them, and deletes them. Delivered
    /// first, so that a hand-over reaches its waiter a round trip sooner: a notice
    /// whose deletion fails is read and delivered again, which a waiter takes as it
    /// takes any wake-up (a hand-over is confirmed by its take-up, not by the notice).
    async fn empty(&self, conn: &mut Conn) -> Result<(), mysql_async::Error> {
        let rows: Vec<Row> = conn
            .query_iter(&self.statements.read)
            .await?
            .map(|row| row)
            .await?;
        let Some(last) = rows
            .last()
            .and_then(|row| row.get_opt::<u64, usize>(0)?.ok())
        else {
            return Ok(());
        };
        for mut row in rows {
            self.deliver(&mut row);
        }
        conn.query_drop(format!("{}{last}", self.statements.empty))
            .await
    }

    /// Delivers one notice: a hand-over to the waiter it names, else a wake-up to one
    /// waiter of its channel.
    fn deliver(&self, row: &mut Row) {
        let channel = row
            .take_opt::<Vec<u8>, usize>(1)
            .and_then(Result::ok)
            .and_then(|bytes| String::from_utf8(bytes).ok());
        let Some(channel) = channel else {
            tracing::warn!(
                target: lock_core::TRACING_TARGET,
                "a notice in the MySQL mailbox names no channel this library writes; waking every waiter"
            );
            self.subscriptions.wake_all();
            return;
        };
        let handed = row
            .take_opt::<Option<Vec<u8>>, usize>(2)
            .and_then(Result::ok)
            .flatten()
            .and_then(|bytes| <[u8; 16]>::try_from(bytes).ok())
            .map(RequestId::from_bytes);
        let attempt = row
            .take_opt::<u32, usize>(3)
            .and_then(Result::ok)
            .unwrap_or(0);
        let token = row
            .take_opt::<Option<u64>, usize>(4)
            .and_then(Result::ok)
            .flatten();
        // A read-write lock's readers read together: its notices wake every listener
        // (the waiter a hand-over names holds; the others ask and find it held).
        let wake = if channel.starts_with(READ_WRITE_CHANNEL) {
            Wake::All
        } else {
            Wake::One
        };
        match handed {
            Some(id) => {
                let handed = Handed::new(id, attempt, token);
                self.subscriptions.deliver_handed(&channel, handed, wake);
            }
            None => self.subscriptions.deliver(&channel, wake),
        }
    }

    /// Connects again, pausing longer after each failure; `None` once the owner is gone.
    async fn reconnect(&mut self) -> Option<Conn> {
        let mut pauses = Pauses::doubling(FIRST_PAUSE, LONGEST_PAUSE);
        loop {
            let connected = tokio::select! {
                connected = open(&self.opts, self.connect_timeout, &self.lock_name) => connected,
                _ = self.alive.changed() => return None,
            };
            match connected {
                Ok(conn) => return Some(conn),
                Err(err) => tracing::warn!(
                    target: lock_core::TRACING_TARGET,
                    error = %err,
                    "the listening connection to MySQL failed; trying again"
                ),
            }
            tokio::select! {
                () = tokio::time::sleep(pauses.next().unwrap_or(LONGEST_PAUSE)) => {}
                _ = self.alive.changed() => return None,
            }
        }
    }
}
