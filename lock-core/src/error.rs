//! The one error type of the lock crates.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A cause as callers hand it to [`Error`]'s constructors.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// A cause as [`Error`] carries it in its `#[source]`: shared, so that the error is
/// `Clone` (one failed subscription is reported to every waiter on it).
///
/// [`Error::source`](std::error::Error::source) hands out the cause itself, not this
/// wrapper, so a caller downcasts it to the backend's or the driver's own type.
#[derive(Debug, Clone)]
pub struct Cause(Arc<dyn StdError + Send + Sync + 'static>);

impl Cause {
    /// Wraps `cause`.
    pub fn new(cause: impl StdError + Send + Sync + 'static) -> Self {
        Self(Arc::new(cause))
    }
}

impl From<BoxError> for Cause {
    fn from(cause: BoxError) -> Self {
        Self(Arc::from(cause))
    }
}

// Not `Error` itself: the derive then reaches the cause through `Deref`, and `source()`
// returns it unwrapped.
impl std::ops::Deref for Cause {
    type Target = dyn StdError + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

/// What went wrong, without the details: match on this to decide what to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument was rejected before anything was sent (empty name, zero lease, overflow).
    InvalidArgument,
    /// The configuration (a URL, a builder setting) is unusable.
    InvalidConfig,
    /// The wait for a lock ran out.
    Timeout,
    /// The caller does not hold the lock it tried to release, or a permit id is not
    /// issued.
    NotHeld,
    /// The hold was lost: its lease expired or renewal found another owner.
    Lost,
    /// The data stored under the lock's name is not a lock of this kind: another kind of
    /// object uses the name, or the backend's data was changed by hand. Nothing was
    /// changed; retrying cannot help.
    Incompatible,
    /// The backend could not be reached, or did not answer in time.
    Connection,
    /// The backend refused the request (ACL, OOM, read-only replica, script error).
    Backend,
    /// The backend answered something this library does not understand.
    Protocol,
    /// The operation needs a tokio runtime and none was running.
    NoRuntime,
    /// The request could never succeed because the caller itself stands in the way (a
    /// reader asking for the write lock).
    WouldDeadlock,
    /// The client was shut down ([`Locks::shutdown`](crate::Locks::shutdown)) and takes no
    /// new locks.
    ShutDown,
    /// The backend does not support what was asked (it is not in its
    /// [`Capabilities`](crate::backend::Capabilities)); nothing was sent.
    Unsupported,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InvalidArgument => "invalid argument",
            Self::InvalidConfig => "invalid configuration",
            Self::Timeout => "timed out",
            Self::NotHeld => "lock not held",
            Self::Lost => "lock lost",
            Self::Incompatible => "incompatible stored data",
            Self::Connection => "connection failure",
            Self::Backend => "backend error",
            Self::Protocol => "protocol error",
            Self::NoRuntime => "no tokio runtime",
            Self::WouldDeadlock => "would deadlock",
            Self::ShutDown => "client shut down",
            Self::Unsupported => "unsupported by the backend",
        })
    }
}

/// The error returned by every fallible operation of the lock crates.
///
/// Match on [`Error::kind`] or use the predicates (`is_timeout`, `is_retryable`, ...).
/// The cause from a driver, when there is one, is in [`std::error::Error::source`].
/// Cheap to clone: causes are shared.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before anything was sent.
    #[error("invalid argument `{argument}`: {reason}")]
    #[non_exhaustive]
    InvalidArgument {
        /// The argument's name, as in the API.
        argument: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// The configuration is unusable.
    #[error("invalid configuration: {reason}")]
    #[non_exhaustive]
    InvalidConfig {
        /// What is wrong with it.
        reason: String,
        /// The underlying parse or driver error, if any.
        #[source]
        source: Option<Cause>,
    },
    /// The wait for a lock, permits or a latch's opening ran out first (with no wait at
    /// all: the one attempt found it busy).
    #[error("{}", timed_out(what, name, *waited))]
    #[non_exhaustive]
    Timeout {
        /// What was waited for: `lock`, `semaphore` or `count-down latch`.
        what: &'static str,
        /// Its name.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The caller does not hold the lock it tried to release.
    #[error(
        "lock `{name}` is not held by this holder{}",
        .lost.map(|reason| format!(" (it was lost: {reason})")).unwrap_or_default()
    )]
    #[non_exhaustive]
    NotHeld {
        /// The lock's name.
        name: String,
        /// Set when the client knew the hold was lost before the release was asked for.
        lost: Option<LostReason>,
    },
    /// A permit id given to an expirable semaphore is not issued there: it never was,
    /// or it was released, or its lease ran out.
    #[error("permit {id} of semaphore `{name}` is not issued (never issued, released, or expired)")]
    #[non_exhaustive]
    PermitNotIssued {
        /// The semaphore's name.
        name: String,
        /// The permit's id, as 32 hex digits.
        id: String,
    },
    /// The hold was lost before it was released.
    #[error("lock `{name}` was lost: {reason}")]
    #[non_exhaustive]
    Lost {
        /// The lock's name.
        name: String,
        /// What was observed.
        reason: LostReason,
    },
    /// The data stored under the name is another kind of object than the one asked for
    /// (another kind of lock, a semaphore, a latch, or data that is no lock at all);
    /// nothing was changed.
    #[error("the data stored under `{name}` is not the kind of object asked for")]
    #[non_exhaustive]
    Incompatible {
        /// The lock's name.
        name: String,
        /// What the backend found (the backend's own typed error).
        #[source]
        source: Cause,
    },
    /// The backend could not be reached or did not answer in time.
    #[error("cannot reach the lock backend while {during}")]
    #[non_exhaustive]
    Connection {
        /// What the client was doing.
        during: &'static str,
        /// The driver's error.
        #[source]
        source: Cause,
    },
    /// The backend refused the request.
    #[error("the lock backend refused the request while {during}")]
    #[non_exhaustive]
    Backend {
        /// What the client was doing.
        during: &'static str,
        /// Whether the same request may succeed later (the server was busy, loading, out
        /// of memory, or too few replicas confirmed), as opposed to a refusal that stays
        /// (a missing permission, a script error).
        retryable: bool,
        /// The server's error.
        #[source]
        source: Cause,
    },
    /// The backend answered something unexpected.
    #[error("unexpected reply from the lock backend: {detail}")]
    #[non_exhaustive]
    Protocol {
        /// What was expected and what came.
        detail: String,
    },
    /// The operation needs a tokio runtime and none was running.
    #[error("no tokio runtime is running")]
    #[non_exhaustive]
    NoRuntime,
    /// The client was shut down and starts nothing new on the store: no acquisition, no
    /// setting, adding, draining or counting down, no force-unlock (releases of what it
    /// holds still go, and reads).
    #[error(
        "the lock client was shut down: it starts nothing new (releases of what it holds still go)"
    )]
    #[non_exhaustive]
    ShutDown,
    /// The backend does not support what was asked; nothing was sent.
    #[error("the lock backend does not support {what}")]
    #[non_exhaustive]
    Unsupported {
        /// What was asked, such as "fair locks".
        what: &'static str,
    },
    /// The caller's own holds make the request impossible: a holder of the read lock
    /// asked for the write lock, which would wait for itself forever.
    #[error(
        "holder cannot take the write lock `{name}` while it holds the read lock (no upgrade: release the read lock first)"
    )]
    #[non_exhaustive]
    WouldDeadlock {
        /// The lock's name.
        name: String,
    },
}

/// Why a hold was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LostReason {
    /// The lease ran out before it was renewed (explicit lease, or renewal kept failing).
    LeaseExpired,
    /// Renewal found that this holder no longer owns the lock on the server.
    OwnerGone,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::LeaseExpired => "its lease expired before it was renewed",
            Self::OwnerGone => "the server no longer lists this holder as its owner",
        })
    }
}

/// A timeout in words: a wait of zero is a try, and says the thing was busy.
fn timed_out(what: &str, name: &str, waited: Duration) -> String {
    if waited.is_zero() {
        format!("{what} `{name}` is busy (one attempt, no wait)")
    } else {
        format!("timed out after {waited:?} waiting for {what} `{name}`")
    }
}

impl Error {
    /// The category of this error.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            Self::InvalidConfig { .. } => ErrorKind::InvalidConfig,
            Self::Timeout { .. } => ErrorKind::Timeout,
            Self::NotHeld { .. } | Self::PermitNotIssued { .. } => ErrorKind::NotHeld,
            Self::Lost { .. } => ErrorKind::Lost,
            Self::Incompatible { .. } => ErrorKind::Incompatible,
            Self::Connection { .. } => ErrorKind::Connection,
            Self::Backend { .. } => ErrorKind::Backend,
            Self::Protocol { .. } => ErrorKind::Protocol,
            Self::NoRuntime => ErrorKind::NoRuntime,
            Self::ShutDown => ErrorKind::ShutDown,
            Self::Unsupported { .. } => ErrorKind::Unsupported,
            Self::WouldDeadlock { .. } => ErrorKind::WouldDeadlock,
        }
    }

    /// The wait for a lock ran out.
    #[must_use]
    pub fn is_timeout(&self) -> bool {
        self.kind() == ErrorKind::Timeout
    }

    /// The caller released a lock it does not hold.
    #[must_use]
    pub fn is_not_held(&self) -> bool {
        self.kind() == ErrorKind::NotHeld
    }

    /// The hold was lost before it was released.
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.kind() == ErrorKind::Lost
    }

    /// The backend failed (unreachable, refused, or answered nonsense); retrying may help.
    #[must_use]
    pub fn is_backend(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Connection | ErrorKind::Backend | ErrorKind::Protocol
        )
    }

    /// Whether the same call may succeed if made again later: the backend could not be
    /// reached or was temporarily unable to serve, or a wait ran out. `false` for every
    /// error that retrying cannot fix (bad input, a refusal that stays, a lost hold, a
    /// shut-down client, an unsupported request).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Connection { .. } | Self::Timeout { .. } => true,
            Self::Backend { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// An argument or setting was rejected; retrying the same call cannot help.
    #[must_use]
    pub fn is_invalid_input(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::InvalidArgument | ErrorKind::InvalidConfig | ErrorKind::Incompatible
        )
    }

    /// Builds an [`Error::InvalidArgument`].
    #[must_use]
    pub fn invalid_argument(argument: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            argument,
            reason: reason.into(),
        }
    }

    /// Builds an [`Error::InvalidConfig`] with an optional cause.
    #[must_use]
    pub fn invalid_config(reason: impl Into<String>, source: Option<BoxError>) -> Self {
        Self::InvalidConfig {
            reason: reason.into(),
            source: source.map(Cause::from),
        }
    }

    /// Builds an [`Error::WouldDeadlock`]: the caller itself stands in the way of the
    /// lock `name` (a reader asking for the write lock).
    #[must_use]
    pub fn would_deadlock(name: impl Into<String>) -> Self {
        Self::WouldDeadlock { name: name.into() }
    }

    /// Builds an [`Error::Connection`]: the backend could not be reached or did not
    /// answer `during` an operation.
    #[must_use]
    pub fn connection(during: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Connection {
            during,
            source: Cause::from(source.into()),
        }
    }

    /// Builds an [`Error::Backend`] from a server refusal that stays (retrying cannot
    /// help).
    #[must_use]
    pub fn backend(during: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            during,
            retryable: false,
            source: Cause::from(source.into()),
        }
    }

    /// Builds an [`Error::Backend`] from a refusal that may pass (a busy or loading
    /// server, too few replicas): retrying later may succeed.
    #[must_use]
    pub fn backend_retryable(during: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            during,
            retryable: true,
            source: Cause::from(source.into()),
        }
    }

    /// Builds an [`Error::Incompatible`]: `found` is the backend's description of what it
    /// found under the name.
    #[must_use]
    pub fn incompatible(name: impl Into<String>, found: impl Into<BoxError>) -> Self {
        Self::Incompatible {
            name: name.into(),
            source: Cause::from(found.into()),
        }
    }

    /// Builds an [`Error::Unsupported`] for `what` (such as "fair locks").
    #[must_use]
    pub fn unsupported(what: &'static str) -> Self {
        Self::Unsupported { what }
    }

    /// Builds an [`Error::Protocol`].
    #[must_use]
    pub fn protocol(detail: impl Into<String>) -> Self {
        Self::Protocol {
            detail: detail.into(),
        }
    }
}

impl Error {
    /// The message followed by every cause, `": "`-separated, as a person reads it in a
    /// log line: `Display` shows the message only, and the causes are in
    /// [`source`](std::error::Error::source).
    #[must_use]
    pub fn chain(&self) -> Chain<'_> {
        Chain(self)
    }
}

/// [`Error::chain`]: an error and its causes, displayed on one line.
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    /// Each cause once: some errors (the drivers' among them) repeat their source's text
    /// in their own message and still return it as their source, and a cause already
    /// said is not said again.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut said = self.0.to_string();
        f.write_str(&said)?;
        let mut cause = self.0.source();
        while let Some(err) = cause {
            let text = err.to_string();
            if !said.contains(&text) {
                write!(f, ": {text}")?;
            }
            said = text;
            cause = err.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_try_that_found_it_busy_says_busy() {
        let tried = Error::Timeout {
            what: "lock",
            name: "job:3".to_owned(),
            waited: Duration::ZERO,
        };
        assert_eq!(
            tried.to_string(),
            "lock `job:3` is busy (one attempt, no wait)"
        );
        let waited = Error::Timeout {
            what: "lock",
            name: "job:3".to_owned(),
            waited: Duration::from_secs(5),
        };
        assert_eq!(
            waited.to_string(),
            "timed out after 5s waiting for lock `job:3`"
        );
    }

    #[test]
    fn cause_is_a_source_and_not_repeated_in_the_message() {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused by peer");
        let err = Error::connection("acquiring", cause);
        assert_eq!(
            err.to_string(),
            "cannot reach the lock backend while acquiring"
        );
        assert_eq!(
            err.source().map(ToString::to_string).as_deref(),
            Some("refused by peer")
        );
        assert!(err.is_backend() && err.is_retryable());
        assert_eq!(err.kind(), ErrorKind::Connection);
        let copy = err.clone();
        assert_eq!(copy.chain().to_string(), err.chain().to_string());
        // The source is the cause itself, downcastable, in the clone too.
        let cause = copy
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            cause.map(std::io::Error::kind),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
        assert_eq!(
            err.chain().to_string(),
            "cannot reach the lock backend while acquiring: refused by peer"
        );
    }

    /// A driver's error that says its source's text and returns the source too, as
    /// some drivers do for I/O errors.
    #[derive(Debug)]
    struct Repeating(std::io::Error);

    impl fmt::Display for Repeating {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}", self.0)
        }
    }

    impl std::error::Error for Repeating {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_chain_says_each_cause_once() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let said = io.to_string();
        let err = Error::connection("connecting", Repeating(io));
        assert_eq!(
            err.chain().to_string(),
            format!("cannot reach the lock backend while connecting: {said}")
        );
    }

    #[test]
    fn predicates_follow_the_kind() {
        let err = Error::NotHeld {
            name: "a".into(),
            lost: Some(LostReason::LeaseExpired),
        };
        assert_eq!(
            err.to_string(),
            "lock `a` is not held by this holder (it was lost: its lease expired before it was renewed)"
        );
        assert!(err.is_not_held() && !err.is_timeout() && !err.is_backend());
        assert!(!err.is_retryable());
        assert!(Error::backend_retryable("acquiring", "LOADING").is_retryable());
        assert!(!Error::backend("acquiring", "NOPERM").is_retryable());
        let err = Error::invalid_argument("lease", "must be positive");
        assert!(err.is_invalid_input());
        assert_eq!(
            err.to_string(),
            "invalid argument `lease`: must be positive"
        );
    }
}
