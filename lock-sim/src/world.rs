//! One simulated run: clients of one memory store behind the fault layer, tasks that
//! lock, re-enter, hold, pause and release every kind at random, and the invariants,
//! checked after every operation and every simulated millisecond.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::{Backend, Guard, Holder, LeasedPermits, Lock, LockName, Locks, Permits};
use tokio::time::{Instant, sleep, timeout};

use crate::faults::{FaultyLink, Network, Profile};
use crate::rng::Rng;
use crate::trace::Trace;

const CLIENTS: usize = 3;
const TASKS: usize = 9;
const OPERATIONS: usize = 14;
const LEASE: Duration = Duration::from_millis(300);
const WINDOW: Duration = Duration::from_millis(200);
const FAIR_PLACE: Duration = Duration::from_millis(600);
/// The permits of the plain and of the expirable semaphore.
const PERMITS: u64 = 2;
/// The longest a waiter may wait while its lock is free in the store.
const LIVENESS_BOUND: Duration = Duration::from_secs(3);
/// How long a waiter for more permits than exist waits, and how long the waiter for one
/// beside it waits: both longer than the liveness bound.
const BEYOND_WAIT: Duration = Duration::from_secs(4);

const MUTEX_NAMES: [&str; 2] = ["m0", "m1"];
const RW_NAME: &str = "rw";
const SEMAPHORE: &str = "permits";
const EXPIRABLE: &str = "leased";

/// The faults of a run, as the simulation uses them by default.
pub(crate) const PROFILE: Profile = Profile {
    delay: 15,
    longest_delay_ms: 120,
    long_delay: 2,
    longest_long_delay_ms: 800,
    fail_before: 4,
    lose_reply: 4,
    late_copy: 2,
    late_copy_windows: 3,
};

/// How a run ended.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The first invariant broken, if any.
    pub(crate) violation: Option<String>,
    /// The digest of every event and their number: equal for two runs of one seed.
    pub(crate) digest: (u64, u64),
    /// The latest events.
    pub(crate) latest: Vec<String>,
}

/// What a task holds, as the checker sees it.
enum Held {
    Guard(Guard),
    Permits(Permits),
    Leased(LeasedPermits),
}

struct Entry {
    name: &'static str,
    held: Held,
}

/// Every hold and wait of the run's tasks.
#[derive(Default)]
struct Ledger {
    entries: Mutex<BTreeMap<u64, Entry>>,
    next: AtomicU64,
    /// Tasks waiting for an exclusive lock: the name and since when.
    waiting: Mutex<BTreeMap<usize, (&'static str, Instant)>>,
    /// Since when each name has been free in the store, as the checker last saw.
    free_since: Mutex<BTreeMap<&'static str, Instant>>,
    violation: Mutex<Option<String>>,
}

impl Ledger {
    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self, name: &'static str, held: Held) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.entries().insert(id, Entry { name, held });
        id
    }

    fn take(&self, id: u64) -> Option<Held> {
        self.entries().remove(&id).map(|entry| entry.held)
    }

    fn wait(&self, task: usize, name: &'static str) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.insert(task, (name, Instant::now()));
    }

    fn waited(&self, task: usize) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.remove(&task);
    }

    fn fail(&self, violation: String) {
        let mut first = self
            .violation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        first.get_or_insert(violation);
    }

    fn violation(&self) -> Option<String> {
        self.violation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Checks every invariant of a running system.
    fn check(&self, store: &MemoryBackend) {
        if let Err(violation) = self.safety() {
            self.fail(violation);
        }
        if let Err(violation) = self.liveness(store) {
            self.fail(violation);
        }
    }

    /// At most one owner whose guard believes it holds an exclusive lock (a reader only
    /// beside the writer that is the same owner); never more valid permit holders than
    /// permits.
    fn safety(&self) -> Result<(), String> {
        let entries = self.entries();
        let mut exclusive: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        let mut readers: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        let (mut permits, mut leased) = (0, 0);
        for entry in entries.values() {
            match &entry.held {
                Held::Guard(guard) if guard.is_held() => {
                    let owners = if guard.kind() == lock_core::LockKind::Read {
                        &mut readers
                    } else {
                        &mut exclusive
                    };
                    owners
                        .entry(entry.name)
                        .or_default()
                        .insert(guard.owner().to_owned());
                }
                Held::Permits(held) => permits += held.count(),
                Held::Leased(held) if held.is_held() => leased += held.count() as u64,
                Held::Guard(_) | Held::Leased(_) => {}
            }
        }
        for (name, owners) in &exclusive {
            if owners.len() > 1 {
                return Err(format!(
                    "TWO OWNERS: {} owners' guards believe they hold {name}",
                    owners.len()
                ));
            }
            if let Some(readers) = readers.get(name)
                && !readers.is_subset(owners)
            {
                return Err(format!(
                    "READER BESIDE A WRITER: another owner's read guard holds {name} \
                     while a write guard does"
                ));
            }
        }
        if permits > PERMITS {
            return Err(format!(
                "OVER CAPACITY: {permits} plain permits held of {PERMITS}"
            ));
        }
        if leased > PERMITS {
            return Err(format!(
                "OVER CAPACITY: {leased} valid expirable permits held of {PERMITS}"
            ));
        }
        Ok(())
    }

    /// No task waits for an exclusive lock that has been free in the store for longer
    /// than the bound, nor for one plain permit while one has been available as long.
    fn liveness(&self, store: &MemoryBackend) -> Result<(), String> {
        let now = Instant::now();
        let held = store.held_locks();
        let mut free_since = self
            .free_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let permit_free = store.available_permits(SEMAPHORE) >= 1;
        let names = MUTEX_NAMES.iter().chain([&RW_NAME]);
        let free = names
            .map(|name| (*name, !held.iter().any(|h| h == name)))
            .chain([(SEMAPHORE, permit_free)]);
        for (name, free) in free {
            if free {
                free_since.entry(name).or_insert(now);
            } else {
                free_since.remove(name);
            }
        }
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        for (task, (name, since)) in waiting.iter() {
            if let Some(free) = free_since.get(name) {
                let stuck_since = (*free).max(*since);
                if now.duration_since(stuck_since) > LIVENESS_BOUND {
                    return Err(format!(
                        "STUCK WAITER: task {task} waited {:?} for {name}, free all along",
                        now.duration_since(stuck_since)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What an operation works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Mutex,
    Fair,
    Read,
    Write,
    /// A fair and a plain guard of one explicit holder, on one name.
    Reenter,
    /// Two guards of one explicit holder and one kind, on one name.
    ReenterSame,
    Permits,
    Leased,
    /// A waiter for more plain permits than exist, and a waiter for one beside it in
    /// the same client.
    Beyond,
}

/// The operations tasks draw from, some more often than others.
pub(crate) const OPS: [Op; 11] = [
    Op::Mutex,
    Op::Mutex,
    Op::Fair,
    Op::Read,
    Op::Write,
    Op::Reenter,
    Op::ReenterSame,
    Op::Reenter,
    Op::Permits,
    Op::Leased,
    Op::Beyond,
];

impl Op {
    /// The operation named `name` on the command line.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Some(match name {
            "mutex" => Self::Mutex,
            "fair" => Self::Fair,
            "read" => Self::Read,
            "write" => Self::Write,
            "reenter" => Self::Reenter,
            "reenter-same" => Self::ReenterSame,
            "permits" => Self::Permits,
            "leased" => Self::Leased,
            "beyond" => Self::Beyond,
            _ => return None,
        })
    }
}

/// What a run exercises: the operations its tasks draw from, and the faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Workload {
    pub(crate) ops: Vec<Op>,
    pub(crate) faults: Faults,
}

/// Which faults the network and the tasks bring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Faults {
    /// Every fault.
    All,
    /// Delays only: nothing is lost, copied, paused or cancelled.
    Delays,
    /// None at all.
    None,
}

impl Faults {
    /// The network's faults.
    fn profile(self) -> Profile {
        let quiet = Profile {
            fail_before: 0,
            lose_reply: 0,
            late_copy: 0,
            ..PROFILE
        };
        match self {
            Self::All => PROFILE,
            Self::Delays => quiet,
            Self::None => Profile {
                delay: 0,
                long_delay: 0,
                ..quiet
            },
        }
    }
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            ops: OPS.to_vec(),
            faults: Faults::All,
        }
    }
}

/// How an operation waits.
#[derive(Debug, Clone, Copy)]
enum Wait {
    Try,
    Bounded(Duration),
    /// Waits long, but its future is dropped after this.
    Cancelled(Duration),
}

/// One task's view of the run.
struct Task {
    index: usize,
    workload: Arc<Workload>,
    locks: Locks,
    link: FaultyLink,
    network: Arc<Network>,
    ledger: Arc<Ledger>,
    store: Arc<MemoryBackend>,
}

impl Task {
    fn draw<T>(&self, draw: impl FnOnce(&mut Rng) -> T) -> T {
        let mut rng = self
            .network
            .rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        draw(&mut rng)
    }

    fn note(&self, event: &str) {
        self.network.trace.note(&format!(
            "task {} (client {}): {event}",
            self.index, self.link.client
        ));
    }

    async fn run(self) {
        for _ in 0..OPERATIONS {
            let op = self.draw(|rng| rng.pick(&self.workload.ops));
            let cancels = self.workload.faults == Faults::All;
            let wait = self.draw(|rng| match rng.below(4) {
                0 => Wait::Try,
                3 if cancels => Wait::Cancelled(rng.millis_below(400)),
                _ => Wait::Bounded(rng.millis_below(500)),
            });
            self.note(&format!("begins {op:?} ({wait:?})"));
            match op {
                Op::Mutex | Op::Fair | Op::Read | Op::Write => self.lock_once(op, wait).await,
                Op::Reenter => self.reenter(wait, false).await,
                Op::ReenterSame => self.reenter(wait, true).await,
                Op::Permits => self.permits(wait).await,
                Op::Leased => self.leased(wait).await,
                Op::Beyond => self.beyond().await,
            }
            self.ledger.check(&self.store);
            let pause = self.draw(|rng| rng.millis_below(60));
            crate::nap(pause).await;
        }
    }

    fn handle(&self, op: Op, name: &'static str, holder: Option<&Holder>) -> Lock {
        let lock = match op {
            Op::Fair => self.locks.fair_mutex(name),
            Op::Read => self.locks.rw_lock(name).reader(),
            Op::Write => self.locks.rw_lock(name).writer(),
            _ => self.locks.mutex(name),
        };
        match holder {
            Some(holder) => lock.with_holder(holder.clone()),
            None => lock,
        }
    }

    /// Takes `lock` as `wait` says, with a caller's lease now and then.
    async fn take(&self, lock: &Lock, name: &'static str, wait: Wait) -> Option<Guard> {
        let lease = self.draw(|rng| rng.chance(20).then(|| LEASE / 3 + rng.millis_below(300)));
        self.ledger.wait(self.index, name);
        let taken = match wait {
            Wait::Try => lock
                .try_lock_for(Duration::ZERO, lease)
                .await
                .ok()
                .flatten(),
            Wait::Bounded(wait) => lock.try_lock_for(wait, lease).await.ok().flatten(),
            Wait::Cancelled(after) => {
                let long = lock.try_lock_for(Duration::from_secs(2), lease);
                timeout(after, long)
                    .await
                    .ok()
                    .and_then(|r| r.ok().flatten())
            }
        };
        self.ledger.waited(self.index);
        taken
    }

    async fn lock_once(&self, op: Op, wait: Wait) {
        let name = match op {
            Op::Read | Op::Write => RW_NAME,
            _ => self.draw(|rng| rng.pick(&MUTEX_NAMES)),
        };
        let lock = self.handle(op, name, None);
        let Some(guard) = self.take(&lock, name, wait).await else {
            self.note(&format!("{op:?} {name}: not taken ({wait:?})"));
            return;
        };
        self.note(&format!("{op:?} {name}: taken"));
        let id = self.ledger.insert(name, Held::Guard(guard));
        self.ledger.check(&self.store);
        self.hold().await;
        self.give_back(id, name).await;
    }

    /// A holder locks one name through the fair and the plain handle (in either order),
    /// or twice through one of them (`same`), then releases the two guards in either
    /// order.
    async fn reenter(&self, wait: Wait, same: bool) {
        let name = self.draw(|rng| rng.pick(&MUTEX_NAMES));
        let holder = Holder::new(&format!("t{}", self.index)).ok();
        let (first, second) = self.draw(|rng| match (same, rng.chance(50)) {
            (false, true) => (Op::Fair, Op::Mutex),
            (false, false) => (Op::Mutex, Op::Fair),
            (true, true) => (Op::Fair, Op::Fair),
            (true, false) => (Op::Mutex, Op::Mutex),
        });
        let outer = self.handle(first, name, holder.as_ref());
        let Some(guard) = self.take(&outer, name, wait).await else {
            self.note(&format!("reenter {name}: not taken"));
            return;
        };
        let outer_id = self.ledger.insert(name, Held::Guard(guard));
        let inner = self.handle(second, name, holder.as_ref());
        let inner_id = self
            .take(&inner, name, Wait::Bounded(LEASE))
            .await
            .map(|guard| self.ledger.insert(name, Held::Guard(guard)));
        self.note(&format!(
            "reenter {name}: {first:?} then {second:?} ({})",
            if inner_id.is_some() {
                "both"
            } else {
                "outer only"
            }
        ));
        self.ledger.check(&self.store);
        self.hold().await;
        let outer_first = self.draw(|rng| rng.chance(50));
        let order = match inner_id {
            Some(inner_id) if outer_first => vec![outer_id, inner_id],
            Some(inner_id) => vec![inner_id, outer_id],
            None => vec![outer_id],
        };
        for id in order {
            self.give_back(id, name).await;
            self.ledger.check(&self.store);
            let gap = self.draw(|rng| rng.millis_below(80));
            crate::nap(gap).await;
        }
    }

    async fn permits(&self, wait: Wait) {
        let semaphore = self.locks.semaphore(SEMAPHORE);
        let taken = match wait {
            Wait::Try => semaphore.try_acquire(1).await.ok().flatten(),
            Wait::Bounded(wait) => semaphore.try_acquire_for(1, wait).await.ok().flatten(),
            Wait::Cancelled(after) => timeout(after, semaphore.acquire(1))
                .await
                .ok()
                .and_then(Result::ok),
        };
        let Some(permits) = taken else {
            self.note(&format!("permits: not taken ({wait:?})"));
            return;
        };
        self.note("permits: taken");
        let id = self.ledger.insert(SEMAPHORE, Held::Permits(permits));
        self.ledger.check(&self.store);
        self.hold().await;
        self.give_back(id, SEMAPHORE).await;
    }

    /// Asks for one permit more than exist, waiting long, and for one permit beside it:
    /// the big waiter may never be served, but must keep nobody else from the permits
    /// (review 2, N6). The one permit is checked by the liveness invariant.
    async fn beyond(&self) {
        let semaphore = self.locks.semaphore(SEMAPHORE);
        let big = timeout(BEYOND_WAIT, semaphore.acquire(PERMITS + 1));
        let one = async {
            // The big waiter asks first, and has starved by the time this one comes.
            crate::nap(Duration::from_millis(50)).await;
            self.ledger.wait(self.index, SEMAPHORE);
            let one = semaphore.try_acquire_for(1, BEYOND_WAIT).await;
            self.ledger.waited(self.index);
            one.ok().flatten()
        };
        let (big, one) = tokio::join!(big, one);
        for (what, taken) in [("all", big.ok().and_then(Result::ok)), ("one", one)] {
            let Some(permits) = taken else {
                self.note(&format!("beyond: {what} not taken"));
                continue;
            };
            self.note(&format!("beyond: {what} taken"));
            let id = self.ledger.insert(SEMAPHORE, Held::Permits(permits));
            self.ledger.check(&self.store);
            self.give_back(id, SEMAPHORE).await;
        }
    }

    async fn leased(&self, wait: Wait) {
        let semaphore = self.locks.expirable_semaphore(EXPIRABLE);
        let taken = match wait {
            Wait::Try => semaphore.try_acquire(1).await.ok().flatten(),
            Wait::Bounded(wait) => semaphore.acquire(1).wait(wait).await.ok(),
            Wait::Cancelled(after) => timeout(after, semaphore.acquire(1))
                .await
                .ok()
                .and_then(Result::ok),
        };
        let Some(permits) = taken else {
            self.note(&format!("leased permit: not taken ({wait:?})"));
            return;
        };
        self.note("leased permit: taken");
        let mut id = self.ledger.insert(EXPIRABLE, Held::Leased(permits));
        self.ledger.check(&self.store);
        self.hold().await;
        // Now and then, some renewals later, the holder sets another lease.
        if self.draw(|rng| rng.chance(40))
            && let Some(Held::Leased(mut permits)) = self.ledger.take(id)
        {
            let lease = self.draw(|rng| LEASE / 2 + rng.millis_below(900));
            let updated = permits.update_lease(lease).await;
            self.note(&format!(
                "leased permit: lease set to {lease:?}: {}",
                ok(&updated)
            ));
            id = self.ledger.insert(EXPIRABLE, Held::Leased(permits));
            self.ledger.check(&self.store);
            // Holds on for up to the new lease: that is what the lease was set for.
            let held_for = self.draw(|rng| rng.millis_below(lease.as_millis() as u64));
            crate::nap(held_for).await;
        }
        self.give_back(id, EXPIRABLE).await;
    }

    /// Holds for a while; now and then the client is paused past its lease (its
    /// requests, renewals included, wait).
    async fn hold(&self) {
        let may_pause = self.workload.faults == Faults::All;
        let (held_for, paused) =
            self.draw(|rng| (rng.millis_below(150), may_pause && rng.chance(8)));
        if paused {
            let until = Instant::now() + LEASE * 2;
            self.note("the client pauses past its lease");
            self.link.pause_until(until);
        }
        crate::nap(held_for).await;
    }

    /// Releases what the ledger's entry `id` holds: awaited, dropped, or given up on
    /// while its release is on its way.
    async fn give_back(&self, id: u64, name: &'static str) {
        let Some(held) = self.ledger.take(id) else {
            return;
        };
        let cancels = self.workload.faults == Faults::All;
        let how = self.draw(|rng| {
            if cancels {
                rng.below(3)
            } else {
                rng.below(2) * 2
            }
        });
        let cut = self.draw(|rng| rng.millis_below(40));
        let done = match (held, how) {
            (Held::Guard(guard), 0) => ok(&guard.unlock().await),
            (Held::Guard(guard), 1) => ok(&timeout(cut, guard.unlock()).await.unwrap_or(Ok(()))),
            (Held::Permits(permits), 0) => ok(&permits.release().await),
            (Held::Leased(permits), 0) => ok(&permits.release().await),
            (held, _) => {
                drop(held);
                "dropped"
            }
        };
        self.note(&format!("{name}: given back ({done})"));
    }
}

fn ok<T, E>(result: &Result<T, E>) -> &'static str {
    if result.is_ok() { "ok" } else { "error" }
}

/// Runs seed `seed` of `workload`; with `echo`, prints every event as it happens.
pub(crate) fn run(seed: u64, workload: &Workload, echo: bool) -> Outcome {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(err) => {
            return Outcome {
                violation: Some(format!("no runtime: {err}")),
                digest: (0, 0),
                latest: Vec::new(),
            };
        }
    };
    runtime.block_on(async {
        // The timers count whole milliseconds from an instant a few microseconds off the
        // clock's start; once a timer has fired, the clock stands on a tick, and every
        // deadline of whole milliseconds from then on falls in the same tick in every run.
        sleep(Duration::from_millis(1)).await;
        simulate(seed, Arc::new(workload.clone()), echo).await
    })
}

async fn simulate(seed: u64, workload: Arc<Workload>, echo: bool) -> Outcome {
    let trace = Arc::new(Trace::new(echo));
    let profile = workload.faults.profile();
    let network = Arc::new(Network {
        rng: Mutex::new(Rng::new(seed)),
        trace: Arc::clone(&trace),
        profile,
        window: WINDOW,
        calm: AtomicBool::new(false),
    });
    let store = Arc::new(MemoryBackend::new());
    let ledger = Arc::new(Ledger::default());
    let names = (LockName::new(SEMAPHORE), LockName::new(EXPIRABLE));
    let (Ok(plain), Ok(leased)) = names else {
        ledger.fail("the semaphores' names are refused".to_owned());
        return outcome(&ledger, &trace);
    };
    let set_up = match (store.semaphores(), store.expirable_semaphores()) {
        (Some(semaphores), Some(expirable)) => {
            semaphores.try_set_permits(&plain, PERMITS).await.is_ok()
                && expirable.try_set_permits(&leased, PERMITS).await.is_ok()
        }
        _ => false,
    };
    if !set_up {
        ledger.fail("the semaphores could not be set up".to_owned());
        return outcome(&ledger, &trace);
    }
    let clients: Vec<(Locks, FaultyLink)> = (0..CLIENTS)
        .map(|client| {
            let link = FaultyLink::new(client, Arc::clone(&store), Arc::clone(&network));
            let locks = Locks::builder(Arc::new(link.clone()))
                .watchdog_lease(LEASE)
                .retry_window(WINDOW)
                .fair_waiter_timeout(FAIR_PLACE)
                .build();
            locks.map(|locks| (locks, link))
        })
        .collect::<Result<_, _>>()
        .unwrap_or_default();
    // The checker looks every simulated millisecond.
    let watching = Arc::new(AtomicBool::new(true));
    let checker = tokio::spawn({
        let (ledger, store, watching) = (
            Arc::clone(&ledger),
            Arc::clone(&store),
            Arc::clone(&watching),
        );
        async move {
            while watching.load(Ordering::Relaxed) {
                ledger.check(&store);
                sleep(Duration::from_millis(1)).await;
            }
        }
    });
    let tasks: Vec<_> = (0..TASKS)
        .filter_map(|index| {
            let (locks, link) = clients.get(index % CLIENTS)?.clone();
            let task = Task {
                index,
                workload: Arc::clone(&workload),
                locks,
                link,
                network: Arc::clone(&network),
                ledger: Arc::clone(&ledger),
                store: Arc::clone(&store),
            };
            Some(tokio::spawn(task.run()))
        })
        .collect();
    for task in tasks {
        if task.await.is_err() {
            ledger.fail("a task panicked".to_owned());
        }
    }
    watching.store(false, Ordering::Relaxed);
    if checker.await.is_err() {
        ledger.fail("the checker panicked".to_owned());
    }
    // Quiet now: what is left settles, every client drains its background work, and
    // everything granted runs out its lease (late copies included).
    network.calm.store(true, Ordering::Relaxed);
    for (locks, _) in &clients {
        locks.shutdown().await;
    }
    sleep(WINDOW * (PROFILE.late_copy_windows + 2) + LEASE * 3 + Duration::from_secs(2)).await;
    trace.note("settled");
    if ledger.violation().is_none()
        && let Err(violation) = settled(&store, &plain, &leased).await
    {
        ledger.fail(violation);
    }
    outcome(&ledger, &trace)
}

fn outcome(ledger: &Ledger, trace: &Trace) -> Outcome {
    Outcome {
        violation: ledger.violation(),
        digest: trace.digest(),
        latest: trace.latest(),
    }
}

/// Once nobody holds anything: no hold outlived its lease, no plain permit was lost, and
/// every expirable permit came back.
async fn settled(store: &MemoryBackend, plain: &LockName, leased: &LockName) -> Result<(), String> {
    let held = store.held_locks();
    if !held.is_empty() {
        return Err(format!(
            "LEFT HELD: {held:?} outlived their leases with nobody holding them"
        ));
    }
    if let Some(semaphores) = store.semaphores() {
        let available = semaphores.available(plain).await.unwrap_or(-1);
        if available != PERMITS.cast_signed() {
            return Err(format!(
                "PERMITS LOST: {available} of {PERMITS} plain permits available at the end"
            ));
        }
    }
    if let Some(semaphores) = store.expirable_semaphores() {
        let (available, issued) = semaphores.permits(leased).await.unwrap_or((-1, 0));
        if available != PERMITS.cast_signed() || issued != 0 {
            return Err(format!(
                "PERMITS NOT BACK: {available} of {PERMITS} expirable permits available, \
                 {issued} issued, at the end"
            ));
        }
    }
    Ok(())
}
