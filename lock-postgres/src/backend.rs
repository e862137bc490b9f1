//! [`PostgresBackend`]: lock-core's `Backend` over the lock tables.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::Error;
use lock_core::backend::{
    Acquire, AcquireRequest, Backend, Capabilities, HoldModel, LockKind, LockRef, LockState,
    Release, ReleaseRequest, Renewal, RequestId,
};
use lock_core::notify::Listener;
use tokio_postgres::types::{FromSql, Type};

use crate::calls::{self, Arg, Param, arg};
use crate::channel;
use crate::combine::{Arguments, Call, Combiner};
use crate::notify::Notifications;
use crate::schema::SchemaName;
use crate::statements::Statements;

/// Locks in PostgreSQL tables.
///
/// Every operation is one call of one of the library's functions on a pooled
/// connection, atomic and without session state; under load, acquires and releases that
/// wait for the pool share a statement (the crate's README says how). Waiting is by
/// LISTEN/NOTIFY on a dedicated connection ([`Notifications`]). Expiries are on the
/// database's clock.
pub struct PostgresBackend {
    pub(crate) statements: Statements,
    pub(crate) schema: SchemaName,
    pub(crate) notifications: Notifications,
    /// The longest lease the database grants (`distlock.failover_quarantine_ms`), read
    /// when connecting.
    pub(crate) longest_lease: Duration,
    /// The acquires and releases waiting for a statement.
    pub(crate) combiner: Combiner,
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("statements", &self.statements)
            .field("combiner", &self.combiner)
            .finish_non_exhaustive()
    }
}

impl PostgresBackend {
    /// What this backend supports: every lock kind, fencing tokens and retried requests
    /// answered once.
    pub const CAPABILITIES: Capabilities = Capabilities::new(HoldModel::Lease)
        .fair(true)
        .read_write(true)
        .fencing(true)
        .retry_safe(true)
        .shared(true)
        .hands_over(true)
        .introspection(true);

    /// The channels this client listens on for its waiters (for diagnostics).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.notifications.subscriptions().channels()
    }

    /// Whether this client prepares its statements: true while every query connection
    /// it opened was proved to be a session of the server itself, false once one was
    /// not (through a pooler or proxy, over a Unix socket, or with several hosts in the
    /// URL), when each call is sent as one unnamed statement. Prepared calls save the
    /// server their parse and plan.
    #[must_use]
    pub fn prepares_statements(&self) -> bool {
        self.statements.preparing.allowed()
    }

    /// The channel a waiter of `lock` listens on (see [`crate::channel`]).
    fn channel(&self, lock: &LockRef) -> String {
        channel::of_lock(&self.schema, lock)
    }

    /// The channel of `lock`'s name (what a release of a read-write lock wakes).
    fn name_channel(&self, lock: &LockRef) -> String {
        channel::of_name(&self.schema, &lock.name)
    }

    /// Calls the entry point `function` with named `args` on a pooled connection and
    /// returns its one value.
    pub(crate) async fn call<T>(
        &self,
        during: &'static str,
        function: &str,
        args: &[Arg<'_>],
    ) -> Result<T, Error>
    where
        T: for<'a> FromSql<'a>,
    {
        let (call, params) = calls::named(function, args);
        let statement = format!("SELECT {}.{call}", self.schema);
        let rows = self.query(during, &statement, &params).await?;
        first_value(&rows, during)
    }

    /// Calls the entry point `function`, which returns nothing, with named `args`.
    pub(crate) async fn perform(
        &self,
        during: &'static str,
        function: &str,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let (call, params) = calls::named(function, args);
        let statement = format!("SELECT {}.{call}", self.schema);
        self.query(during, &statement, &params).await.map(drop)
    }

    /// Runs `statement` with typed parameters on a pooled connection (see
    /// [`Statements::query`]).
    pub(crate) async fn query(
        &self,
        during: &'static str,
        statement: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<tokio_postgres::Row>, Error> {
        self.statements.query(during, statement, params).await
    }
}

impl PostgresBackend {
    /// Calls the entry point `function`, which returns `bigint[]`, on `lock` with
    /// `arguments`, in a statement it may share with other callers' calls (see
    /// [`crate::combine`]).
    async fn combined(
        &self,
        during: &'static str,
        function: &'static str,
        lock: &LockRef,
        arguments: impl Arguments,
    ) -> Result<Vec<i64>, Error> {
        let call = Call {
            function,
            name: lock.name.as_str().to_owned(),
            during,
            arguments: Box::new(arguments),
        };
        self.combiner.call(&self.statements, call).await
    }
}

/// The arguments every hot call starts with: the lock and the lease.
struct LockArgs {
    name: String,
    owner: String,
    kind: &'static str,
    lease_ms: i64,
}

impl LockArgs {
    fn of(lock: &LockRef, lease: Duration) -> Self {
        Self {
            name: lock.name.as_str().to_owned(),
            owner: lock.owner.as_str().to_owned(),
            kind: lock.kind.as_str(),
            lease_ms: millis(lease),
        }
    }

    /// The lock's arguments, followed by `rest`.
    fn with<'a>(&'a self, rest: &[Arg<'a>]) -> Vec<Arg<'a>> {
        let mut args = Vec::with_capacity(4 + rest.len());
        args.extend([
            arg("p_name", &self.name, "text"),
            arg("p_owner", &self.owner, "text"),
            arg("p_kind", &self.kind, "text"),
            arg("p_lease_ms", &self.lease_ms, "bigint"),
        ]);
        args.extend_from_slice(rest);
        args
    }
}

/// The arguments of `acquire`.
struct AcquireArgs {
    lock: LockArgs,
    fencing: bool,
    request: String,
    window_ms: i64,
    waits: bool,
    place_ms: i64,
    channel: String,
    handover: bool,
    attempt: i32,
}

impl Arguments for AcquireArgs {
    fn args(&self) -> Vec<Arg<'_>> {
        self.lock.with(&[
            arg("p_fencing", &self.fencing, "boolean"),
            arg("p_request", &self.request, "text::uuid"),
            arg("p_window_ms", &self.window_ms, "bigint"),
            arg("p_waits", &self.waits, "boolean"),
            arg("p_place_ms", &self.place_ms, "bigint"),
            arg("p_channel", &self.channel, "text"),
            arg("p_handover", &self.handover, "boolean"),
            arg("p_attempt", &self.attempt, "integer"),
        ])
    }
}

/// The arguments of `release`.
struct ReleaseArgs {
    lock: LockArgs,
    window_ms: i64,
    grant: String,
    channel: String,
}

impl Arguments for ReleaseArgs {
    fn args(&self) -> Vec<Arg<'_>> {
        self.lock.with(&[
            arg("p_window_ms", &self.window_ms, "bigint"),
            arg("p_grant", &self.grant, "text::uuid"),
            arg("p_channel", &self.channel, "text"),
        ])
    }
}

/// The first value of the first row: an entry point's answer.
fn first_value<T>(rows: &[tokio_postgres::Row], during: &'static str) -> Result<T, Error>
where
    T: for<'a> FromSql<'a>,
{
    let row = rows
        .first()
        .ok_or_else(|| Error::protocol(format!("{during}: no row")))?;
    row.try_get(0)
        .map_err(|err| Error::protocol(format!("{during}: {err}")))
}

/// Refuses a name PostgreSQL cannot store (a NUL character) before anything is sent.
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    if name.contains('\0') {
        return Err(Error::invalid_argument(
            "name",
            "PostgreSQL cannot store a NUL character in a lock name",
        ));
    }
    Ok(())
}

/// The longest lock name this backend keeps, in bytes: a name and an owner must fit one
/// entry of the tables' b-tree indexes (about 2.7 KB) even when they do not compress.
pub const MAX_NAME_BYTES: usize = 1024;

/// The longest owner string (client id and holder) this backend keeps, in bytes.
pub const MAX_OWNER_BYTES: usize = 1024;

/// Refuses, before anything is sent, a lock the tables cannot hold: a name or owner too
/// long for their indexes, or with a NUL character (PostgreSQL's text cannot store one).
pub(crate) fn check_fits(lock: &LockRef) -> Result<(), Error> {
    check_name(lock.name.as_str())?;
    if lock.owner.as_str().contains('\0') {
        return Err(Error::invalid_argument(
            "holder",
            "PostgreSQL cannot store a NUL character in a holder id or client id",
        ));
    }
    if lock.name.as_str().len() > MAX_NAME_BYTES {
        return Err(Error::invalid_argument(
            "name",
            format!(
                "the PostgreSQL backend keeps names of at most {MAX_NAME_BYTES} bytes, this \
                 one has {}",
                lock.name.as_str().len()
            ),
        ));
    }
    if lock.owner.as_str().len() > MAX_OWNER_BYTES {
        return Err(Error::invalid_argument(
            "holder",
            format!(
                "the PostgreSQL backend keeps owners (client id and holder) of at most \
                 {MAX_OWNER_BYTES} bytes, this one has {}",
                lock.owner.as_str().len()
            ),
        ));
    }
    Ok(())
}

/// How the tables store holds of `kind`: the mutex and the fair lock share theirs.
fn stored_kind(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Read => "read",
        LockKind::Write => "write",
        _ => "mutex",
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

fn unexpected(what: &str, reply: &[i64]) -> Error {
    Error::protocol(format!("{what} answered {reply:?}"))
}

#[async_trait]
impl Backend for PostgresBackend {
    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES.max_lease(Some(self.longest_lease))
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        check_fits(lock)?;
        let place_kept_for = request.wait.map(|wait| millis(wait.place_kept_for));
        let attempt = request
            .wait
            .map_or(0, |wait| i32::try_from(wait.attempt).unwrap_or(i32::MAX));
        let arguments = AcquireArgs {
            lock: LockArgs::of(lock, request.lease),
            fencing: request.fencing,
            request: request.id.to_string(),
            window_ms: millis(request.retry_window),
            waits: request.waits(),
            place_ms: place_kept_for.unwrap_or(1),
            channel: self.channel(lock),
            // A part of a composite lock is not handed over: each part could go to
            // another client, and none win them all.
            handover: request.waits_to_be_woken_alone(),
            attempt,
        };
        let reply = self
            .combined("acquiring", "acquire", lock, arguments)
            .await?;
        match reply.as_slice() {
            [1, holds, token, high, low] => Ok(Acquire::Acquired {
                holds: u32::try_from(*holds).map_err(|_| unexpected("acquire", &reply))?,
                token: u64::try_from(*token)
                    .ok()
                    .filter(|&t| request.fencing && t > 0),
                origin: Some(RequestId::from_halves(*high, *low)),
            }),
            [0, ttl, _] => Ok(Acquire::Busy {
                ttl: u64::try_from(*ttl).ok().map(Duration::from_millis),
                reserved: false,
            }),
            [3, _, _] => Err(Error::would_deadlock(lock.name.as_str())),
            [5, _, _] => Ok(Acquire::Ended),
            _ => Err(unexpected("acquire", &reply)),
        }
    }

    /// Names the acquisition that gives up: a late cancellation leaves a later
    /// acquisition of the same owner its place and its handed hold.
    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        if !matches!(lock.kind, LockKind::Fair | LockKind::Mutex) {
            return Ok(());
        }
        check_fits(lock)?;
        let (name, owner) = (lock.name.as_str(), lock.owner.as_str());
        let request = acquisition.id.to_string();
        let args = [
            arg("p_name", &name, "text"),
            arg("p_owner", &owner, "text"),
            arg("p_request", &request, "text::uuid"),
        ];
        self.perform("leaving the fair queue", "cancel_acquisition", &args)
            .await
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        check_fits(lock)?;
        let token = i64::try_from(token).map_err(|_| {
            Error::invalid_argument("token", "PostgreSQL keeps fencing tokens up to 2^63 - 1")
        })?;
        let name = lock.name.as_str();
        let args = [
            arg("p_name", &name, "text"),
            arg("p_token", &token, "bigint"),
        ];
        self.perform("raising the fencing counter", "raise_fencing", &args)
            .await
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        check_fits(lock)?;
        let arguments = ReleaseArgs {
            lock: LockArgs::of(lock, request.lease),
            // Kept twice the window: a copy of the grant's acquire that comes later than
            // its own retries could must still find the grant ended.
            window_ms: millis(request.retry_window.saturating_mul(2)),
            grant: request.grant.to_string(),
            channel: self.name_channel(lock),
        };
        let reply = self
            .combined("releasing", "release", lock, arguments)
            .await?;
        match reply.as_slice() {
            [0, _] => Ok(Release::NotHeld),
            [1, holds] => Ok(Release::StillHeld {
                holds: u32::try_from(*holds).map_err(|_| unexpected("release", &reply))?,
            }),
            [2, _] => Ok(Release::Released),
            _ => Err(unexpected("release", &reply)),
        }
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let names: Vec<&str> = locks.iter().map(|lock| lock.name.as_str()).collect();
        let owners: Vec<&str> = locks.iter().map(|lock| lock.owner.as_str()).collect();
        let kinds: Vec<&str> = locks.iter().map(|lock| stored_kind(lock.kind)).collect();
        // One statement for the whole batch.
        let lease_ms = millis(lease);
        let (call, params) = calls::named(
            "renew",
            &[
                arg("p_names", &names, "text[]"),
                arg("p_owners", &owners, "text[]"),
                arg("p_kinds", &kinds, "text[]"),
                arg("p_lease_ms", &lease_ms, "bigint"),
            ],
        );
        let statement = format!("SELECT * FROM {}.{call}", self.schema);
        let rows = match self.query("renewing", &statement, &params).await {
            Ok(rows) => rows,
            Err(err) => return locks.iter().map(|_| Renewal::Failed(err.clone())).collect(),
        };
        let renewed: Vec<((&str, &str, &str), Option<RequestId>)> = rows
            .iter()
            .filter_map(|row| {
                let origin: Option<&str> = row.try_get(3).ok()?;
                let key = (
                    row.try_get(0).ok()?,
                    row.try_get(1).ok()?,
                    row.try_get(2).ok()?,
                );
                Some((key, origin.and_then(RequestId::from_hex)))
            })
            .collect();
        locks
            .iter()
            .map(|lock| {
                let key = (
                    lock.name.as_str(),
                    lock.owner.as_str(),
                    stored_kind(lock.kind),
                );
                renewed
                    .iter()
                    .find(|(renewed, _)| *renewed == key)
                    .map_or(Renewal::Gone, |(_, origin)| Renewal::Renewed {
                        origin: *origin,
                    })
            })
            .collect()
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        check_fits(lock)?;
        // The lock's mode (a writer's, else the readers', else the mutex's), the owner's
        // live holds of the kind asked about, and the lock's time left (its longest
        // lease). A plain statement, so every operator and function is named as
        // pg_catalog's (see `describe`, third review R3).
        let statement = format!(
            "SELECT CASE WHEN pg_catalog.bool_or(kind OPERATOR(pg_catalog.=) 'write'::text)
                              THEN 'write'
                         WHEN pg_catalog.bool_or(kind OPERATOR(pg_catalog.=) 'read'::text)
                              THEN 'read'
                         ELSE pg_catalog.max(kind) END,
                    coalesce(pg_catalog.sum(
                        CASE WHEN kind OPERATOR(pg_catalog.<>) 'read'::text THEN holds
                             ELSE (SELECT pg_catalog.count(*) FROM pg_catalog.unnest(lease_ends) e
                                    WHERE e OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()) END)
                        FILTER (WHERE owner OPERATOR(pg_catalog.=) $2
                                  AND kind OPERATOR(pg_catalog.=) $3), 0)::bigint,
                    pg_catalog.ceil(extract(epoch FROM pg_catalog.max(expires_at)
                                                      OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())
                                    OPERATOR(pg_catalog.*) 1000::numeric)::bigint
               FROM {s}.holds
              WHERE name OPERATOR(pg_catalog.=) $1 AND expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()",
            s = self.schema
        );
        let params: [Param<'_>; 3] = [
            (&lock.name.as_str(), Type::TEXT),
            (&lock.owner.as_str(), Type::TEXT),
            (&stored_kind(lock.kind), Type::TEXT),
        ];
        let rows = self.query("inspecting", &statement, &params).await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::protocol("inspecting: no row"))?;
        let mode: Option<String> = row.get(0);
        let holds: i64 = row.get(1);
        let ttl: Option<i64> = row.get(2);
        // A read-write lock shows as locked on the side that holds it; a mutex or fair
        // lock whenever anyone holds the name.
        let locked = match (lock.kind, mode.as_deref()) {
            (_, None) => false,
            (LockKind::Read | LockKind::Write, Some(mode)) => mode == stored_kind(lock.kind),
            _ => true,
        };
        Ok(LockState::new(
            locked,
            u32::try_from(holds).unwrap_or(0),
            ttl.and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis),
        ))
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        check_fits(lock)?;
        self.call(
            "force-releasing",
            "force_release",
            &[
                arg("p_name", &lock.name.as_str(), "text"),
                arg("p_kind", &lock.kind.as_str(), "text"),
                arg("p_channel", &self.name_channel(lock), "text"),
            ],
        )
        .await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        check_fits(lock)?;
        self.notifications.listen(&self.channel(lock)).await
    }

    fn listener_at_hand(&self, lock: &LockRef) -> Option<Listener> {
        // Most acquisitions find nothing subscribed: they build no channel name.
        if self.notifications.subscriptions().is_empty() {
            return None;
        }
        check_fits(lock).ok()?;
        self.notifications.listening(&self.channel(lock))
    }

    fn introspection(&self) -> &dyn lock_core::Introspect {
        self
    }
}
