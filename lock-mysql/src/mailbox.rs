//! What a transaction tells the waiters it concerns: each client's mailbox (rows of the
//! wakes table under the client's key), what a waiting attempt leaves with the machine
//! for its hand-over's notice, and the notices with their statements (written in the
//! deciding transaction, then the client's listening statement interrupted; see
//! [`crate::notify`] for the reading side).

use lock_core::backend::RequestId;
use lock_core::protocol::Field;

use crate::schema::{Tables, hex};

/// Where a waiter's client listens: its mailbox in the wakes table. The client's
/// listening connection holds the user-level lock [`Mailbox::lock_name`] while it
/// listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mailbox {
    pub(crate) key: RequestId,
}

impl Mailbox {
    /// The name of the user-level lock (`GET_LOCK`) the listening connection holds: 46
    /// characters, within MySQL's 64.
    pub(crate) fn lock_name(self) -> String {
        format!("distlock-mailbox-{}", self.key)
    }
}

/// What a waiting attempt leaves with the machine, for its hand-over's notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ask {
    pub(crate) mailbox: Mailbox,
    /// Which attempt of its acquisition it was.
    pub(crate) attempt: u32,
    /// Whether the acquisition asked for fencing tokens.
    pub(crate) fencing: bool,
}

impl Field for Ask {
    fn put(&self, out: &mut Vec<u8>) {
        self.mailbox.key.put(out);
        self.attempt.put(out);
        self.fencing.put(out);
    }

    fn take(input: &mut &[u8]) -> Option<Self> {
        Some(Self {
            mailbox: Mailbox {
                key: RequestId::take(input)?,
            },
            attempt: u32::take(input)?,
            fencing: bool::take(input)?,
        })
    }
}

/// A notice for a waiter's client, written in the transaction that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Notice {
    pub(crate) mailbox: Mailbox,
    /// The channel the waiter listens on.
    pub(crate) channel: String,
    /// A hand-over: the acquisition handed the lock, the attempt the store ran last,
    /// and the token (when it asked for one). `None`: a wake-up to ask again.
    pub(crate) handed: Option<(RequestId, u32, Option<u64>)>,
}

impl Notice {
    /// The statement that puts the notice in its client's mailbox, in the transaction
    /// that decided it.
    pub(crate) fn insert(&self, tables: &Tables) -> String {
        let (handed, attempt, token) = match self.handed {
            Some((id, attempt, token)) => (
                hex(&id.to_bytes()),
                attempt,
                token.map_or_else(|| "NULL".to_owned(), |token| token.to_string()),
            ),
            None => ("NULL".to_owned(), 0, "NULL".to_owned()),
        };
        format!(
            "INSERT INTO {} (listener, channel, handed, attempt, token) VALUES ({}, {}, {handed}, {attempt}, {token})",
            tables.wakes(),
            hex(&self.mailbox.key.to_bytes()),
            hex(self.channel.as_bytes()),
        )
    }

    /// The statements that interrupt the listening statement of the notice's client, run
    /// after the commit in the same round trip. The connection to interrupt is the one that
    /// holds the client's mailbox lock (`IS_USED_LOCK`), so a client that went away, or a
    /// connection id the server gave someone else since, is never interrupted. (A first
    /// version looked the statement up in `information_schema.PROCESSLIST`; MariaDB 10.11
    /// crashed on that lookup under load.) A client whose statement is not running reads
    /// its mailbox before its next one.
    pub(crate) fn wake(&self) -> [String; 4] {
        [
            format!(
                "SET @distlock_wake = IFNULL(CONCAT('KILL QUERY ', IS_USED_LOCK('{}')), 'DO 0')",
                self.mailbox.lock_name()
            ),
            "PREPARE distlock_wake FROM @distlock_wake".to_owned(),
            "EXECUTE distlock_wake".to_owned(),
            "DEALLOCATE PREPARE distlock_wake".to_owned(),
        ]
    }
}
