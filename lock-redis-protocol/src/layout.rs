//! Key and channel names: Redisson's layout, so that Redisson peers share our locks.

use lock_core::{LockName, RequestId};

/// Prefix of the mutex release channel.
pub const MUTEX_CHANNEL_PREFIX: &str = "redisson_lock__channel";

/// The name with a cluster hash tag: `{name}`, or the name itself when it already holds a
/// `{`, as Redisson does. Every derived key and channel embeds this, so all of a lock's
/// keys live in the slot of the lock's own key.
#[must_use]
pub fn tagged(name: &LockName) -> String {
    tagged_key(&[], name, &[])
}

/// The pieces of a name's hash tag: the braces around it, or none when it holds a `{`.
fn tag(name: &LockName) -> [&str; 3] {
    let name = name.as_str();
    if name.contains('{') {
        ["", name, ""]
    } else {
        ["{", name, "}"]
    }
}

/// `prefix`, the name with its hash tag, then `suffix`, in a string of its exact size,
/// without the formatting machinery.
fn tagged_key(prefix: &[&str], name: &LockName, suffix: &[&str]) -> String {
    let length = |pieces: &[&str]| pieces.iter().map(|piece| piece.len()).sum::<usize>();
    let mut keys = Keys::with_room(name, |tagged| length(prefix) + tagged + length(suffix));
    keys.add_around(prefix, suffix);
    keys.buffer
}

/// How one kind of key or channel is spelled: what comes before a lock's tagged name and
/// what after it (a key of one request ends with the request's id after that).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spelling {
    before: &'static str,
    after: &'static str,
}

impl Spelling {
    const fn new(before: &'static str, after: &'static str) -> Self {
        Self { before, after }
    }

    /// This key of `name` alone.
    fn of(self, name: &LockName) -> String {
        self.alone(name, None)
    }

    /// This key of `name` for `request` alone.
    fn of_request(self, name: &LockName, request: RequestId) -> String {
        self.alone(name, Some(request))
    }

    /// One key in a string of its exact size.
    fn alone(self, name: &LockName, request: Option<RequestId>) -> String {
        let mut keys = Keys::with_room(name, |tagged| {
            let id = if request.is_some() { HEX_LEN } else { 0 };
            self.before.len() + tagged + self.after.len() + id
        });
        match request {
            Some(request) => keys.add_for_request(self, request),
            None => keys.add(self),
        };
        keys.buffer
    }
}

/// How long a request id is in a key: 32 hex digits.
const HEX_LEN: usize = 32;

const RESERVATION: Spelling = Spelling::new("redisson_lock_reserved:", "");
const FAIR_QUEUE: Spelling = Spelling::new("redisson_lock_queue:", "");
const FAIR_DEADLINES: Spelling = Spelling::new("redisson_lock_timeout:", "");
const FAIR_ALIVE: Spelling = Spelling::new("redisson_lock_waiter_alive:", "");
const WAITING_CLIENTS: Spelling = Spelling::new("redisson_lock_waiting:", "");
const WAITING_REQUESTS: Spelling = Spelling::new("redisson_lock_waiting_request:", "");
const RW_CHANNEL: Spelling = Spelling::new(RW_CHANNEL_PREFIX, "");
const TOKEN: Spelling = Spelling::new("redisson_lock_token:", "");
const GRANT_LATCH: Spelling = Spelling::new("redisson_lock_latch:", ":");
const RELEASE_LATCH: Spelling = Spelling::new("redisson_unlock_latch:", ":");
const MUTEX_CHANNEL: Spelling = Spelling::new("redisson_lock__channel:", "");
const COUNT_DOWN_ANSWER: Spelling = Spelling::new("", ":redisson_latch_count_down:");
const SEMAPHORE_CHANNEL: Spelling = Spelling::new("redisson_sc:", "");
const PERMIT_ANSWER: Spelling = Spelling::new("", ":redisson_sc_request:");
const PERMIT_RESERVATION: Spelling = Spelling::new("redisson_sc_reserved:", "");
const PERMIT_TIMEOUTS: Spelling = Spelling::new("", ":timeout");
const KIND_MARKER: Spelling = Spelling::new("redisson_sync_kind:", "");
const PERMIT_PEAK: Spelling = Spelling::new("redisson_sc_peak:", "");

/// The keys of one request on one lock, built one after the other into one buffer: one
/// allocation per request, and the name's hash tag worked out once (a mutex's acquire
/// and release take nine keys between them).
pub(crate) struct Keys<'n> {
    tag: [&'n str; 3],
    buffer: String,
}

/// Where one key lies in its [`Keys`]' buffer.
pub(crate) type KeyAt = std::ops::Range<usize>;

impl<'n> Keys<'n> {
    /// Room for the keys of a mutex acquire (the most a request takes on the hot path:
    /// seven, one of them for a request and one for an owner) with prefixes of up to 32
    /// bytes and owners of up to 64.
    pub(crate) fn new(name: &'n LockName) -> Self {
        Self::with_room(name, |tagged| 7 * (tagged + 32) + 1 + HEX_LEN + 64)
    }

    /// Room for `room(length of the tagged name)` bytes.
    fn with_room(name: &'n LockName, room: impl FnOnce(usize) -> usize) -> Self {
        let tag = tag(name);
        let tagged = tag.iter().map(|piece| piece.len()).sum();
        Self {
            tag,
            buffer: String::with_capacity(room(tagged)),
        }
    }

    /// Adds the `spelling` key of the name.
    pub(crate) fn add(&mut self, spelling: Spelling) -> KeyAt {
        self.add_around(&[spelling.before], &[spelling.after])
    }

    /// Adds the pieces of `before`, the tagged name, then the pieces of `after`.
    ///
    /// Never inlined, for the reason given at [`Decimals::new`](crate::decimals): one
    /// copy serves every key of every request.
    #[inline(never)]
    fn add_around(&mut self, before: &[&str], after: &[&str]) -> KeyAt {
        let start = self.buffer.len();
        for piece in before.iter().chain(&self.tag).chain(after) {
            self.buffer.push_str(piece);
        }
        start..self.buffer.len()
    }

    /// Adds the `spelling` key of the name for `request`.
    pub(crate) fn add_for_request(&mut self, spelling: Spelling, request: RequestId) -> KeyAt {
        let start = self.add(spelling).start;
        request.push_hex(&mut self.buffer);
        start..self.buffer.len()
    }

    /// The reservation key (see [`reservation_key`]).
    pub(crate) fn reservation(&mut self) -> KeyAt {
        self.add(RESERVATION)
    }

    /// The waiting clients' key (see [`waiting_clients_key`]).
    pub(crate) fn waiting_clients(&mut self) -> KeyAt {
        self.add(WAITING_CLIENTS)
    }

    /// The waiting clients' acquisitions (see [`waiting_requests_key`]).
    pub(crate) fn waiting_requests(&mut self) -> KeyAt {
        self.add(WAITING_REQUESTS)
    }

    /// The fencing counter (see [`token_key`]).
    pub(crate) fn token(&mut self) -> KeyAt {
        self.add(TOKEN)
    }

    /// The mutex release channel (see [`mutex_channel`]).
    pub(crate) fn mutex_channel(&mut self) -> KeyAt {
        self.add(MUTEX_CHANNEL)
    }

    /// The grant latch of `request` (see [`grant_latch_key`]).
    pub(crate) fn grant_latch(&mut self, request: RequestId) -> KeyAt {
        self.add_for_request(GRANT_LATCH, request)
    }

    /// The grants hash of `owner`'s hold, its write hold when `writer` (see
    /// [`grants_key`]).
    pub(crate) fn grants(&mut self, owner: &str, writer: bool) -> KeyAt {
        let suffix = if writer { ":write" } else { "" };
        self.add_around(&[GRANTS_PREFIX], &[":", owner, suffix])
    }

    /// The key at `at`.
    pub(crate) fn get(&self, at: KeyAt) -> &str {
        self.buffer.get(at).unwrap_or_default()
    }
}

/// The key of the lock's hash: the name itself.
#[must_use]
pub fn lock_key(name: &LockName) -> &str {
    name.as_str()
}

/// The reservation key of a lock: `redisson_lock_reserved:{name}`, a string holding the
/// owner of the starving waiter that goes next (not part of Redisson's layout: Redisson
/// clients ignore it and may still overtake, which costs fairness, never exclusion).
#[must_use]
pub fn reservation_key(name: &LockName) -> String {
    RESERVATION.of(name)
}

/// The fair lock's waiter queue: `redisson_lock_queue:{name}` (a list of owners).
#[must_use]
pub fn fair_queue_key(name: &LockName) -> String {
    FAIR_QUEUE.of(name)
}

/// The fair lock's waiter deadlines: `redisson_lock_timeout:{name}` (a zset owner -> ms).
#[must_use]
pub fn fair_deadlines_key(name: &LockName) -> String {
    FAIR_DEADLINES.of(name)
}

/// When each of this library's fair-lock waiters last asked, plus the waiter timeout:
/// `redisson_lock_waiter_alive:{name}` (a hash owner -> server ms; not part of Redisson's
/// layout). Redisson moves every score of `redisson_lock_timeout` by its wait slot as
/// the queue advances, so those scores cannot tell whether one of our waiters still asks.
#[must_use]
pub fn fair_alive_key(name: &LockName) -> String {
    FAIR_ALIVE.of(name)
}

/// Redisson's wait slot (its fair lock's default `threadWaitTime`, 5 minutes): a new
/// waiter's score is the last waiter's score (or now plus the lock's ttl) plus one slot,
/// and every score moves one slot back when a waiter ahead takes the lock or gives up.
pub const REDISSON_WAIT_SLOT_MS: u64 = 300_000;

/// [`REDISSON_WAIT_SLOT_MS`] as the scripts take it.
pub(crate) const REDISSON_WAIT_SLOT_TEXT: &str = "300000";

/// The fair lock's waiter queue, deadline and liveness keys, which every fair script
/// takes after the lock key. The liveness hash (ours, not Redisson's) holds, per owner
/// of ours that waits,
/// `<deadline ms>:<request id>:<fencing 0|1>:<place ms>:<attempt>:<latch ms>:<lease ms>`:
/// until when it keeps its place, which acquisition a release hands the lock to, how
/// long that acquisition's latch outlives a handed hold, and its lease (a handed hold
/// lasts the place or the lease, whichever is shorter).
#[must_use]
pub fn fair_queue_keys(name: &LockName) -> [String; 3] {
    [
        fair_queue_key(name),
        fair_deadlines_key(name),
        fair_alive_key(name),
    ]
}

/// The clients of this library with a waiter on a mutex (or a writer on a read-write
/// lock): `redisson_lock_waiting:{name}` (a zset wake id -> server ms when the client
/// registered; not part of Redisson's layout). A release offers the lock to the client
/// registered first, and wakes it alone instead of every client when every listener of
/// the lock's channel is registered.
#[must_use]
pub fn waiting_clients_key(name: &LockName) -> String {
    WAITING_CLIENTS.of(name)
}

/// Which acquisition of each waiting client of a mutex (or writer) waits now:
/// `redisson_lock_waiting_request:{name}` (a hash wake id ->
/// `<request id>:<fencing 0|1>:<place ms>:<latch ms>:<attempt>:<field>`, the field being
/// the owner's, `<owner>:write` for a writer; not part of Redisson's layout). A release that wakes the client registered first alone hands the lock over
/// to that acquisition (see the prelude's `hand_over`).
#[must_use]
pub fn waiting_requests_key(name: &LockName) -> String {
    WAITING_REQUESTS.of(name)
}

/// How a client's wake id starts. A release that wakes one client alone (sent only when
/// every listener of the lock's channel is one of ours, so Redisson peers never see one)
/// publishes the lock's channel on the client's own channel (see [`own_channel`]) where
/// the client listens there, else the wake id on the lock's channel, where every client
/// hears it and the others ignore it.
pub const WAKE_ID_PREFIX: &str = "distlock-wake:";

/// The channel a client listens on, from its first mutex wait for its life, to be woken
/// alone: `redisson_lock__channel:<wake id>` (classic pub/sub outside a cluster only).
/// It falls under the lock channels' ACL pattern, and never meets a lock's channel: a wake id
/// holds no `{`, a lock's channel always does. The scripts build it the same way
/// (`own_channel` in the prelude).
#[must_use]
pub fn own_channel(wake_id: &str) -> String {
    format!("{MUTEX_CHANNEL_PREFIX}:{wake_id}")
}

/// Whether `channel` is a client's own channel (see [`own_channel`]).
#[must_use]
pub fn is_own_channel(channel: &str) -> bool {
    channel
        .strip_prefix(MUTEX_CHANNEL_PREFIX)
        .and_then(|rest| rest.strip_prefix(':'))
        .is_some_and(|id| id.starts_with(WAKE_ID_PREFIX))
}

/// The channel one fair-lock waiter listens on: `redisson_lock__channel:{name}:<owner>`.
#[must_use]
pub fn fair_waiter_channel(name: &LockName, owner: &str) -> String {
    tagged_key(&[MUTEX_CHANNEL_PREFIX, ":"], name, &[":", owner])
}

/// What every read-write lock's channel starts with (see [`rw_channel`]).
pub const RW_CHANNEL_PREFIX: &str = "redisson_rwlock:";

/// The channel of a read-write lock: `redisson_rwlock:{name}`.
#[must_use]
pub fn rw_channel(name: &LockName) -> String {
    RW_CHANNEL.of(name)
}

/// The prefix of one owner's read-hold keys: `{name}:<owner>:rwlock_timeout` (hold `n`
/// lives in `<prefix>:<n>`).
#[must_use]
pub fn read_hold_prefix(name: &LockName, owner: &str) -> String {
    tagged_key(&[], name, &[":", owner, ":rwlock_timeout"])
}

/// The fencing counter: `redisson_lock_token:{name}`.
#[must_use]
pub fn token_key(name: &LockName) -> String {
    TOKEN.of(name)
}

/// Where a grant is remembered for retries of its acquire request:
/// `redisson_lock_latch:{name}:<request id>` (our own key; Redisson has none).
#[must_use]
pub fn grant_latch_key(name: &LockName, request: RequestId) -> String {
    GRANT_LATCH.of_request(name, request)
}

/// What a client said about itself, for introspection: `redisson_lock_client:<client id>`
/// (our own key; Redisson has none). Three lines: its name, host and process id.
#[must_use]
pub fn client_key(client_id: &str) -> String {
    format!("redisson_lock_client:{client_id}")
}

/// What comes before a lock's tagged name in a grants hash's key.
const GRANTS_PREFIX: &str = "redisson_lock_grants:";

/// The grants of one owner's hold: `redisson_lock_grants:{name}:<owner>`, or
/// `...:<owner>:write` for a write hold (our own key; Redisson has none). A hash: field
/// `o` names the grant that began the hold, and each live grant's id names its origin
/// (and, for a read grant, its own expiry), with the lock's expiry; see the prelude's
/// `record_grant`.
#[must_use]
pub fn grants_key(name: &LockName, owner: &str, writer: bool) -> String {
    let suffix = if writer { ":write" } else { "" };
    tagged_key(&[GRANTS_PREFIX], name, &[":", owner, suffix])
}

/// Redisson's unlock latch, `redisson_unlock_latch:{name}:<request id>`, where Redisson
/// remembers a release's answer. Our scripts keep a release's answer in its grant's
/// latch instead ([`grant_latch_key`]); the bench's Redisson-like floor uses this one.
#[must_use]
pub fn release_latch_key(name: &LockName, request: RequestId) -> String {
    RELEASE_LATCH.of_request(name, request)
}

/// The restart epoch key (`redisson_lock_dataset`, or `redisson_lock_dataset:{tag}` per
/// cluster slot): in which dataset history (replication id) the server started granting
/// locks, and when, for the restart quarantine. (Versions that tied the quarantine to
/// the run id kept it in `redisson_lock_epoch`; a new name keeps clients of both from
/// resetting each other's quarantine during an upgrade.)
pub const EPOCH_PREFIX: &str = "redisson_lock_dataset";

/// A short hash tag whose key slot is `slot`, so that a per-slot key can join a lock's
/// script in a cluster.
#[must_use]
pub fn tag_for_slot(slot: u16) -> String {
    // Every slot is hit well within a million candidates (about 16 384 on average).
    (0u32..1_000_000)
        .map(|n| n.to_string())
        .find(|tag| crate::slot::key_slot(tag) == slot)
        .unwrap_or_default()
}

/// The channel a mutex release is published on: `redisson_lock__channel:{name}`.
#[must_use]
pub fn mutex_channel(name: &LockName) -> String {
    MUTEX_CHANNEL.of(name)
}

/// The prefix of every count-down latch's channel.
pub const LATCH_CHANNEL_PREFIX: &str = "redisson_countdownlatch__channel__";

/// A count-down latch's channel as Java's Redisson names it:
/// `redisson_countdownlatch__channel__{name}`, braces always added (its exception to its
/// naming rule).
#[must_use]
pub fn latch_channel(name: &LockName) -> String {
    format!("{LATCH_CHANNEL_PREFIX}{{{name}}}")
}

/// The channel this library's latch waiters listen on: Java's, except for a name with
/// its own hash tag (`{user:1}:ready`), where Java's added braces hash another string
/// than the key's and, on a cluster, put the channel in another slot (so that a
/// message published next to the key never reaches a sharded subscriber). Then the
/// prefix and the name as they are, in the key's slot.
#[must_use]
pub fn latch_listen_channel(name: &LockName) -> String {
    if name.as_str().contains('{') {
        format!("{LATCH_CHANNEL_PREFIX}{name}")
    } else {
        latch_channel(name)
    }
}

/// Where a count-down's answer is remembered for its retries:
/// `{name}:redisson_latch_count_down:<request id>` (our own key; Redisson has none).
#[must_use]
pub fn count_down_answer_key(name: &LockName, request: RequestId) -> String {
    COUNT_DOWN_ANSWER.of_request(name, request)
}

/// A semaphore's channel, shared with the permit-expirable semaphore: `redisson_sc:{name}`.
#[must_use]
pub fn semaphore_channel(name: &LockName) -> String {
    SEMAPHORE_CHANNEL.of(name)
}

/// Where a permit request's answer is remembered for its retries:
/// `{name}:redisson_sc_request:<request id>` (our own key; Redisson has none). For a plain
/// semaphore's acquisition it is the grant: the number of permits, kept without expiry
/// while they are held, then `r<count>` (the release's answer) for the retry window.
#[must_use]
pub fn permit_answer_key(name: &LockName, request: RequestId) -> String {
    PERMIT_ANSWER.of_request(name, request)
}

/// What keeps the plain count under a name, `semaphore` or `latch`:
/// `redisson_sync_kind:{name}` (our own key; Redisson has none). A semaphore and a
/// count-down latch keep the same plain count under the name, so without it each would
/// take the other's for its own. Written when our scripts create the count, removed when
/// they delete it; a marker whose count is gone says nothing, and a count without a
/// marker (a Redisson peer's) is taken for whatever the caller says it is.
#[must_use]
pub fn kind_marker_key(name: &LockName) -> String {
    KIND_MARKER.of(name)
}

/// A semaphore's peak (both kinds): `redisson_sc_peak:{name}`, the most permits seen
/// available at once since the count last went down (our own key; Redisson has none). A
/// starving waiter for more than the peak reserves nothing (see
/// [`PermitAnswer::BeyondPeak`](lock_core::PermitAnswer::BeyondPeak)).
#[must_use]
pub fn permit_peak_key(name: &LockName) -> String {
    PERMIT_PEAK.of(name)
}

/// Where a semaphore's permits are held back for a starving waiter (both kinds):
/// `redisson_sc_reserved:{name}` (our own key; Redisson has none).
#[must_use]
pub fn permit_reservation_key(name: &LockName) -> String {
    PERMIT_RESERVATION.of(name)
}

/// An expirable semaphore's issued permits: the sorted set `{name}:timeout` (member the
/// permit id's 16 bytes, score its expiry in epoch ms), as Redisson's.
#[must_use]
pub fn permit_timeouts_key(name: &LockName) -> String {
    PERMIT_TIMEOUTS.of(name)
}

#[cfg(test)]
mod tests;
