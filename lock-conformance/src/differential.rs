//! The differential test: the same sequences of events on a store and on the grant rules'
//! state machine ([`lock_core::protocol`]), with the same replies and the same holder
//! after every step. Re-exported through [`crate::scenarios`].
//!
//! Each sequence is a seeded random walk over what clients and faults do to one mutex
//! (or fair lock, or read-write lock: there the first two acquisitions write and the
//! third reads as the second's owner, and nobody of another library listens):
//! three acquisitions ask, re-ask, take up a handed hold, release, give up (two wait;
//! the third, of the first's owner, only tries: it re-enters, and a client's waiters for
//! one lock ask one at a time anyway); a late copy of any earlier attempt arrives; an
//! operator force-releases; an owner's watchdog renews (the store says which hold); a
//! client of another library starts or stops listening on the lock's channel (it never
//! registers, as Redisson's do: a release offers it the mutex). Each owner is a client of
//! its own (a backend with its own connections), which listens on the lock once it
//! waits, as a waiter of ours does, so that a release may hand the lock to it. A store
//! counts the listeners beyond its registered waiters as other libraries' (it cannot
//! tell them apart), and so does the sequence for the rules before each release and
//! cancellation ([`Event::Others`]). Leases and offers are long: time and failovers are
//! the exhaustive check's and the simulation's.
//!
//! In every other sequence, an owner with one acquisition that writes is the owner of
//! that acquisition's request alone ([`Owner::of_request`]), as an acquisition outside
//! any holder's scope is: a store may keep fewer records for its hold.
//!
//! Fencing tokens are compared by order (a store's are clock-seeded), and replies that
//! carry no more than "busy" are compared as such.

mod compare;

use crate::timing::{ms, secs};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Acquire, Renewal};
use lock_core::notify::Listener;
use lock_core::protocol::{Event, Name, Reply, Side};
use lock_core::{
    AcquireRequest, Backend, Error, LockKind, LockName, LockRef, Owner, ReleaseRequest, RequestId,
};
use lock_redis_protocol::ProtocolOptions;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Fixture;
use crate::scenarios::unique;
use compare::{Tokens, acquired, holders, released, rules_holders, same};

/// The lease of every acquisition (ms): long enough that nothing expires in a sequence.
const LEASE_MS: u64 = 30_000;
/// How long a waiter keeps its place (ms).
const PLACE_MS: u64 = 10_000;
/// Acquisitions per sequence; acquisition `i` is of owner `owners(kind, fair)[i]`: a
/// mutex's third re-enters its first's hold; a fair lock's has an owner of its own (a
/// fair queue keeps one place per owner, which a try of the same owner would take
/// over); a read-write lock's reads as its second's owner.
fn owners(kind: LockKind, fair: bool) -> [u32; 3] {
    match kind {
        LockKind::Read | LockKind::Write => [1, 2, 2],
        _ if fair => [1, 2, 3],
        _ => [1, 2, 1],
    }
}

/// The kind of lock acquisition `i` of a sequence on `kind` takes: a read-write
/// lock's third reads.
fn kind_of(kind: LockKind, i: usize) -> LockKind {
    match kind {
        LockKind::Read | LockKind::Write if i == 2 => LockKind::Read,
        LockKind::Read | LockKind::Write => LockKind::Write,
        kind => kind,
    }
}
/// Sequences per fixture, and events per sequence.
const SEQUENCES: u64 = 80;
const EVENTS: usize = 20;

/// One client of the store per owner, and what the sequence has done with it.
struct Client {
    backend: Arc<dyn Backend>,
    /// The lock as the owner's first acquisition takes it (the writer's side of a
    /// read-write lock).
    lock: LockRef,
    listening: Option<Listener>,
}

/// An acquisition of the sequence: its request (one id for all its attempts), how many
/// attempts it sent, whether one of them was answered with the lock (a late copy's
/// answer goes nowhere), and whether it is over.
struct Acquisition {
    request: AcquireRequest,
    attempts: u32,
    learnt: bool,
    over: bool,
}

/// Runs the sequences on the fixture's mutex.
pub async fn a_store_keeps_the_grant_rules(fx: &dyn Fixture) {
    if let Some(disagreement) = first_disagreement(fx, LockKind::Mutex).await {
        panic!("{disagreement}");
    }
}

/// Runs the sequences on the fixture's fair lock.
pub async fn a_store_keeps_the_grant_rules_of_the_fair_lock(fx: &dyn Fixture) {
    if let Some(disagreement) = first_disagreement(fx, LockKind::Fair).await {
        panic!("{disagreement}");
    }
}

/// Runs the sequences on the fixture's read-write lock.
pub async fn a_store_keeps_the_grant_rules_of_the_read_write_lock(fx: &dyn Fixture) {
    if let Some(disagreement) = first_disagreement(fx, LockKind::Write).await {
        panic!("{disagreement}");
    }
}

/// Runs the sequences on the fixture's lock of `kind` (a mutex, a fair lock, or a
/// read-write lock for either of its sides) until the
/// store answers otherwise than the rules, or holds otherwise; returns what differed and
/// the sequence that led there. For tests that plant a defect in a store's server-side
/// code and require this test to catch it.
pub async fn first_disagreement(fx: &dyn Fixture, kind: LockKind) -> Option<String> {
    let backends = Backends::new(fx).await;
    for seed in 0..SEQUENCES {
        if let Err(disagreement) = run(fx, &backends, kind, seed).await {
            return Some(disagreement);
        }
    }
    None
}

/// The store's clients, one per owner and one for the client of another library, made
/// once for every sequence (each sequence has a lock name of its own): a client's
/// connections cost a server more than a sequence's requests.
struct Backends {
    owners: HashMap<u32, Arc<dyn Backend>>,
    outsider: Arc<dyn Backend>,
}

impl Backends {
    async fn new(fx: &dyn Fixture) -> Self {
        // Offers to other libraries outlast a sequence, as in the rules (whose time stands).
        let options = ProtocolOptions::default().reservation(secs(60));
        let mut owners = HashMap::new();
        for owner in [1, 2, 3] {
            owners.insert(owner, fx.backend_with(options).await);
        }
        Self {
            owners,
            outsider: fx.backend().await,
        }
    }
}

/// One sequence's store side: a client per owner, the acquisitions, and the client of
/// another library while it listens.
struct Sequence {
    clients: HashMap<u32, Client>,
    outsider: (Arc<dyn Backend>, Option<Listener>),
    owners: [u32; 3],
    kind: LockKind,
    acquisitions: Vec<Acquisition>,
    ids: HashMap<RequestId, u32>,
}

impl Sequence {
    /// `sole`: an owner with one acquisition in the sequence, which writes, is the owner of
    /// that acquisition's request alone (`Owner::of_request`), as an acquisition outside
    /// any holder's scope is; else every owner is a holder's.
    fn new(backends: &Backends, kind: LockKind, fair: bool, sole: bool) -> Self {
        let owners = owners(kind, fair);
        let kind = kind_of(kind, 0);
        let name = LockName::new(&unique("differential")).unwrap();
        let acquisitions: Vec<Acquisition> = (0..3)
            .map(|i| {
                let request = AcquireRequest::new(Duration::from_millis(LEASE_MS))
                    .fencing(true)
                    .fresh_id();
                let request = match place(i) {
                    Some(place) => request.enqueue(Duration::from_millis(place)),
                    None => request,
                };
                Acquisition {
                    request,
                    attempts: 0,
                    learnt: false,
                    over: false,
                }
            })
            .collect();
        let ids = acquisitions
            .iter()
            .enumerate()
            .map(|(i, a)| (a.request.id, model_id(i)))
            .collect();
        let mut clients = HashMap::new();
        for owner in [1, 2, 3] {
            let client_id = format!("0000000{owner}-d1ff-0000-0000-000000000000");
            let mut asking = (0..3).filter(|&i| owners[i] == owner);
            let only = match (asking.next(), asking.next()) {
                (Some(i), None) if sole && kind_of(kind, i) != LockKind::Read => Some(i),
                _ => None,
            };
            let holder = match only {
                Some(i) => Owner::of_request(&client_id, acquisitions[i].request.id),
                None => Owner::new(&client_id, "seq"),
            };
            let client = Client {
                backend: Arc::clone(&backends.owners[&owner]),
                lock: LockRef::new(kind, name.clone(), holder),
                listening: None,
            };
            clients.insert(owner, client);
        }
        Self {
            clients,
            outsider: (Arc::clone(&backends.outsider), None),
            owners,
            kind,
            acquisitions,
            ids,
        }
    }

    /// Frees the sequence's lock for whoever comes next.
    async fn clean_up(&self) {
        for client in self.clients.values() {
            client.backend.force_release(&client.lock).await.unwrap();
            if self.kind == LockKind::Write {
                let readers = LockRef::new(
                    LockKind::Read,
                    client.lock.name.clone(),
                    client.lock.owner.clone(),
                );
                client.backend.force_release(&readers).await.unwrap();
            }
        }
    }

    /// How many listen on the lock's channel: our clients that waited, and the client of
    /// another library.
    fn listening(&self) -> u32 {
        let ours = self
            .clients
            .values()
            .filter(|c| c.listening.is_some())
            .count();
        u32::try_from(ours).unwrap() + u32::from(self.outsider.1.is_some())
    }

    /// Waits until a Redis server counts the mutex's listeners as the sequence does: a
    /// subscription is made (or dropped) on a connection of its own, which the server
    /// may reach after the next release, and a release counts the listeners.
    async fn settle_listeners(&self, fx: &dyn Fixture) {
        let (Some(redis), lock) = (fx.redis(), &self.clients[&1].lock) else {
            return;
        };
        if lock.kind != LockKind::Mutex {
            return;
        }
        let channel = format!("redisson_lock__channel:{{{}}}", lock.name.as_str());
        let expected = i64::from(self.listening());
        for _ in 0..400 {
            if crate::wakes::listeners(redis, &channel).await == expected {
                return;
            }
            tokio::time::sleep(ms(5)).await;
        }
        panic!("the server never counted {expected} listeners of {channel}");
    }

    /// The client of another library starts listening, or stops.
    async fn outsider_turns(&mut self) -> &'static str {
        if self.outsider.1.take().is_some() {
            return "the other library's client stops listening";
        }
        let lock = &self.clients[&1].lock;
        let outsider = LockRef::new(lock.kind, lock.name.clone(), Owner::new("outsider", "1"));
        self.outsider.1 = Some(self.outsider.0.listen(&outsider).await.unwrap());
        "the other library's client listens"
    }

    /// Does `choice` to acquisition `i` on the store, if it may: the event for the
    /// rules, the store's reply in their terms, and what it was.
    async fn act(&mut self, i: usize, choice: u32) -> Option<(Event, Reply, &'static str)> {
        let owner = self.owners[i];
        let id = model_id(i);
        let client = &self.clients[&owner];
        let acquisition = &mut self.acquisitions[i];
        let kind = kind_of(self.kind, i);
        let side = if kind == LockKind::Read {
            Side::Read
        } else {
            Side::Write
        };
        let lock = &LockRef::new(kind, client.lock.name.clone(), client.lock.owner.clone());
        let backend = &client.backend;
        Some(match choice {
            // A late copy of the acquisition's latest attempt.
            0..=2 if acquisition.attempts > 0 => {
                let copy = acquisition.request.attempt(acquisition.attempts);
                let reply = acquired(backend.acquire(lock, copy).await, &self.ids);
                (attempt(i, owner, side), reply, "late copy")
            }
            // Its next attempt (a take-up, when it was handed the lock).
            0..=5 if !acquisition.over && !acquisition.learnt => {
                acquisition.attempts += 1;
                let next = acquisition.request.attempt(acquisition.attempts);
                let reply = backend.acquire(lock, next).await;
                acquisition.learnt |= matches!(reply, Ok(Acquire::Acquired { .. }));
                // A reader's write attempt is refused, and its acquisition is over.
                acquisition.over |= matches!(reply, Err(Error::WouldDeadlock { .. }));
                if matches!(reply, Ok(Acquire::Busy { .. }))
                    && place(i).is_some()
                    && client.listening.is_none()
                {
                    let listener = backend.listen(lock).await.unwrap();
                    self.clients.get_mut(&owner).unwrap().listening = Some(listener);
                }
                (
                    attempt(i, owner, side),
                    acquired(reply, &self.ids),
                    "attempt",
                )
            }
            // A guard's unlock. (The undo of an attempt whose answer was lost is the same
            // request; for a waiter it leaves the client's registration in place, and
            // Redis then wakes that client where the rules hand the lock to the next
            // waiter: a difference of liveness the sequences leave out for now.)
            6 | 7 if acquisition.learnt && !acquisition.over => {
                acquisition.over = true;
                let grant = acquisition.request.id;
                let release = ReleaseRequest::new(Duration::from_millis(LEASE_MS), grant);
                let reply = backend.release(lock, release).await.unwrap();
                let event = Event::Release {
                    side,
                    id,
                    owner,
                    lease: LEASE_MS,
                };
                (event, released(reply), "release")
            }
            // A waiter that gives up: it never learnt of a grant (it would hold).
            8 | 9
                if acquisition.attempts > 0
                    && place(i).is_some()
                    && !acquisition.learnt
                    && !acquisition.over =>
            {
                acquisition.over = true;
                backend
                    .cancel_wait(lock, &acquisition.request)
                    .await
                    .unwrap();
                (Event::Cancel { id, owner }, Reply::Done, "cancel")
            }
            10 => {
                let held = backend.force_release(lock).await.unwrap();
                (
                    Event::ForceRelease(side),
                    Reply::Forced(held),
                    "force-release",
                )
            }
            // The owner's watchdog renews its hold, and learns which hold it renewed.
            11 => {
                let lease = Duration::from_millis(LEASE_MS);
                let renewal = backend.renew(std::slice::from_ref(lock), lease).await;
                let reply = match renewal.first() {
                    Some(Renewal::Renewed { origin }) => Reply::Renewed {
                        origin: origin.and_then(|o| self.ids.get(&o).copied()).unwrap_or(0),
                    },
                    Some(Renewal::Gone) => Reply::Gone,
                    other => panic!("a renewal failed: {other:?}"),
                };
                let event = Event::Renew {
                    side,
                    owner,
                    lease: LEASE_MS,
                };
                (event, reply, "renewal")
            }
            _ => return None,
        })
    }
}

async fn run(
    fx: &dyn Fixture,
    backends: &Backends,
    kind: LockKind,
    seed: u64,
) -> Result<(), String> {
    let fair = kind == LockKind::Fair || fx.fair_mutex();
    // Clients of other libraries wait for a mutex only (a release offers it to them).
    let others = kind == LockKind::Mutex;
    // Every other sequence has owners of one request alone.
    let mut sequence = Sequence::new(backends, kind, fair, seed % 2 == 1);
    let mut machine = Name::new(fair, 60_000);
    let mut tokens = Tokens::default();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut trace = Vec::new();
    // The acquisitions the rules granted (or handed the lock) so far.
    let mut granted = HashSet::new();
    // Every other sequence begins with the client of another library listening.
    if seed % 2 == 1 && others {
        trace.push(sequence.outsider_turns().await.to_owned());
        sequence.settle_listeners(fx).await;
    }
    for _ in 0..EVENTS {
        let i = rng.random_range(0..3);
        let choice = rng.random_range(0..13);
        if choice == 12 && others {
            trace.push(sequence.outsider_turns().await.to_owned());
            sequence.settle_listeners(fx).await;
            continue;
        }
        let Some((event, reply, what)) = sequence.act(i, choice).await else {
            continue;
        };
        sequence.settle_listeners(fx).await;
        if others && matches!(event, Event::Release { .. } | Event::Cancel { .. }) {
            // As the store counts them as the release runs.
            let registered = u32::try_from(machine.waiting()).unwrap();
            machine.step(Event::Others(
                sequence.listening().saturating_sub(registered),
            ));
        }
        let expected = machine.step(event);
        // A store may count the holds of a grant found again (a late copy, a take-up) as
        // it first did, or as they are now.
        let found_again = matches!(event, Event::Attempt { id, .. } if granted.contains(&id));
        let reply = match (reply, expected.reply) {
            (Reply::Acquired { token, origin, .. }, Reply::Acquired { holds, .. })
                if found_again =>
            {
                Reply::Acquired {
                    holds,
                    token,
                    origin,
                }
            }
            _ => reply,
        };
        if let (Event::Attempt { id, .. }, Reply::Acquired { .. }) = (event, expected.reply) {
            granted.insert(id);
        }
        if let Some(hand_over) = expected.handed {
            granted.insert(hand_over.id);
        }
        trace.push(format!(
            "{what} of {}: store {reply:?}, rules {:?}",
            model_id(i),
            expected
        ));
        let disagreement = if same(reply, expected.reply, &mut tokens) {
            let held = holders(&sequence.clients[&1], sequence.kind).await;
            let rules = rules_holders(&machine, sequence.kind);
            (held != rules)
                .then(|| format!("the store's holders {held:?} differ from the rules' {rules:?}"))
        } else {
            Some("the store answered otherwise than the rules".to_owned())
        };
        if let Some(disagreement) = disagreement {
            sequence.clean_up().await;
            return Err(format!(
                "{kind}, seed {seed}: {disagreement}:\n  {}",
                trace.join("\n  ")
            ));
        }
    }
    sequence.clean_up().await;
    Ok(())
}

/// The machine's id of acquisition `i`.
fn model_id(i: usize) -> u32 {
    u32::try_from(i).unwrap() + 1
}

/// How long acquisition `i` keeps its place when it waits; `None`: it only tries.
fn place(i: usize) -> Option<u64> {
    (i < 2).then_some(PLACE_MS)
}

/// The event of an attempt of acquisition `i` of `owner`, for `side`.
fn attempt(i: usize, owner: u32, side: Side) -> Event {
    Event::Attempt {
        side,
        id: model_id(i),
        owner,
        lease: LEASE_MS,
        place: place(i),
        ask: (),
    }
}
