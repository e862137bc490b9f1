//! One simulated run: clients of one memory store behind the fault layer, tasks that
//! lock, re-enter, hold, pause and release every kind at random, and the invariants,
//! checked after every operation and every simulated millisecond.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::notify::Handed;
use lock_core::{Backend, LockName, Locks, Owner};
use tokio::time::{Instant, sleep};

use crate::faults::{FaultyLink, Network, Profile};
use crate::rng::Rng;
use crate::trace::Trace;

mod foreign;
mod ledger;
mod operator;
mod task;
mod workload;

use ledger::Ledger;
use task::Task;
pub(crate) use workload::{Faults, Op, Workload};

const CLIENTS: usize = 3;

const TASKS: usize = 9;

const OPERATIONS: usize = 14;

const LEASE: Duration = Duration::from_millis(300);

/// The longest lease a task asks for (now and then a task asks for a lease of its own,
/// from a third of the watchdog's up to this): no hold may last longer unrenewed.
const LONGEST_LEASE: Duration = Duration::from_millis(400);

const WINDOW: Duration = Duration::from_millis(200);

const FAIR_PLACE: Duration = Duration::from_millis(600);

/// The permits of the plain and of the expirable semaphore.
const PERMITS: u64 = 2;

/// The longest a waiter may wait while its lock is free in the store.
const LIVENESS_BOUND: Duration = Duration::from_secs(3);

/// How many times a mutex may change hands while one waits for it.
const STARVATION_TURNS: u64 = 8;

/// How long a waiter for more permits than exist waits, and how long the waiter for one
/// beside it waits: both longer than the liveness bound.
const BEYOND_WAIT: Duration = Duration::from_secs(4);

/// The exclusive locks' names. The first two serve mutexes, fair locks and re-entries
/// through both (one name's first use decides which rules it keeps, as one key serves
/// both on a server); the last, [`SHARED_NAME`], only mutexes.
const MUTEX_NAMES: [&str; 3] = ["m0", "m1", SHARED_NAME];

/// The names fair locks and re-entries use.
const MIXED_NAMES: [&str; 2] = ["m0", "m1"];

/// The names a mutex is drawn from: the shared one as often as the other two together.
const MUTEX_PICKS: [&str; 4] = ["m0", "m1", SHARED_NAME, SHARED_NAME];

/// The mutex our clients share with a client of another library (see the foreign
/// module): only a mutex, since that client never registers, as a fair lock's waiters
/// must.
const SHARED_NAME: &str = "mx";

/// Tasks of ours that contend for the shared mutex beside the client of another library.
const CONTENDERS: usize = 3;

/// How long a contender waits for the shared mutex.
const CONTENDED: Duration = Duration::from_secs(2);

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
    /// The store's hand-overs (mutexes and fair locks).
    pub(crate) hand_overs: lock_core::memory::HandOvers,
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
                hand_overs: lock_core::memory::HandOvers::default(),
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
        ends: crate::faults::Ends::default(),
    });
    let store = Arc::new(MemoryBackend::new().with_max_lease(LONGEST_LEASE));
    if let Some(defect) = workload.defect {
        store.plant_defect(defect);
    }
    let ledger = Arc::new(Ledger::default());
    let names = (LockName::new(SEMAPHORE), LockName::new(EXPIRABLE));
    let (Ok(plain), Ok(leased)) = names else {
        ledger.fail("the semaphores' names are refused".to_owned());
        return outcome(&ledger, &trace, &store);
    };
    let set_up = store
        .semaphores()
        .try_set_permits(&plain, PERMITS)
        .await
        .is_ok()
        && store
            .expirable_semaphores()
            .try_set_permits(&leased, PERMITS)
            .await
            .is_ok();
    if !set_up {
        ledger.fail("the semaphores could not be set up".to_owned());
        return outcome(&ledger, &trace, &store);
    }
    let clients = connect(&store, &network);
    let (handed, operator_hears) = tokio::sync::mpsc::unbounded_channel();
    let forces = workload.faults == Faults::All;
    delay_notices(&store, &clients, &network, forces.then_some(handed));
    // The checker looks every simulated millisecond.
    let watching = Arc::new(AtomicBool::new(true));
    let checker = tokio::spawn(check(
        Arc::clone(&ledger),
        Arc::clone(&store),
        Arc::clone(&network),
        Arc::clone(&watching),
    ));
    let operator = forces.then(|| {
        tokio::spawn(
            operator::Operator {
                store: Arc::clone(&store),
                ledger: Arc::clone(&ledger),
                network: Arc::clone(&network),
                handed: operator_hears,
                working: Arc::clone(&watching),
            }
            .run(),
        )
    });
    let tasks = spawn_tasks(&workload, &clients, &store, &network, &ledger);
    for task in tasks {
        if task.await.is_err() {
            ledger.fail("a task panicked".to_owned());
        }
    }
    watching.store(false, Ordering::Relaxed);
    if checker.await.is_err() {
        ledger.fail("the checker panicked".to_owned());
    }
    if let Some(operator) = operator
        && operator.await.is_err()
    {
        ledger.fail("the operator panicked".to_owned());
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
    outcome(&ledger, &trace, &store)
}

/// Starts the run's tasks: each of ours on its client, and where mutexes are locked the
/// client of another library and our contenders for the mutex it shares.
fn spawn_tasks(
    workload: &Arc<Workload>,
    clients: &[(Locks, FaultyLink)],
    store: &Arc<MemoryBackend>,
    network: &Arc<Network>,
    ledger: &Arc<Ledger>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let task = |index: usize| {
        let (locks, link) = clients.get(index % CLIENTS)?.clone();
        Some(Task {
            index,
            workload: Arc::clone(workload),
            locks,
            link,
            network: Arc::clone(network),
            ledger: Arc::clone(ledger),
            store: Arc::clone(store),
        })
    };
    let mut tasks: Vec<_> = (0..TASKS)
        .filter_map(task)
        .map(|task| tokio::spawn(task.run()))
        .collect();
    if foreign::Foreign::joins(workload) {
        let foreign = foreign::Foreign {
            index: TASKS,
            link: crate::faults::link(CLIENTS, Arc::clone(store), Arc::clone(network)),
            network: Arc::clone(network),
            ledger: Arc::clone(ledger),
        };
        tasks.push(tokio::spawn(foreign.run()));
        let contenders = (TASKS + 1..=TASKS + CONTENDERS).filter_map(task);
        tasks.extend(contenders.map(|task| tokio::spawn(task.contend())));
    }
    tasks
}

/// The run's clients, each behind its own faulty link to `store`.
fn connect(store: &Arc<MemoryBackend>, network: &Arc<Network>) -> Vec<(Locks, FaultyLink)> {
    (0..CLIENTS)
        .map(|client| {
            let link = crate::faults::link(client, Arc::clone(store), Arc::clone(network));
            let locks = Locks::builder(Arc::new(link.clone()))
                .watchdog_lease(LEASE)
                .retry_window(WINDOW)
                .fair_waiter_timeout(FAIR_PLACE)
                .fencing(true)
                .build();
            locks.map(|locks| (locks, link))
        })
        .collect::<Result<_, _>>()
        .unwrap_or_default()
}

/// How many simulated milliseconds apart the checker reads the store's holds.
const STORE_LOOKS_EVERY: u64 = 5;

/// Checks every invariant every simulated millisecond while `watching` (those that read
/// the store's holds every [`STORE_LOOKS_EVERY`]).
async fn check(
    ledger: Arc<Ledger>,
    store: Arc<MemoryBackend>,
    network: Arc<Network>,
    watching: Arc<AtomicBool>,
) {
    let mut ticks = 0u64;
    let mut noted = false;
    while watching.load(Ordering::Relaxed) {
        ledger.check(&store);
        // The first violation goes into the trace where it happened.
        if !noted && let Some(violation) = ledger.violation() {
            network.trace.note(&violation);
            noted = true;
        }
        // The store's holds and the revoked guards every few milliseconds: their bounds
        // are hundreds of milliseconds, and each look reads the store.
        if ticks.is_multiple_of(STORE_LOOKS_EVERY) {
            if let Err(violation) = ledger::leases(&store).await {
                ledger.fail(violation);
            }
            if let Err(violation) = ledger.revocations(&store).await {
                ledger.fail(violation);
            }
        }
        ticks += 1;
        if let Some(violation) = network.ends.violation() {
            ledger.fail(violation);
        }
        sleep(Duration::from_millis(1)).await;
    }
}

/// A hand-over's notice reaches a paused client when it resumes, and now and then late
/// anyway: a waiter must count its hold from the attempt the hand-over followed, never
/// from the notice.
/// With `forces`, a hand-over is now and then followed by a force-release of its lock
/// (the operator hears of it there).
fn delay_notices(
    store: &MemoryBackend,
    clients: &[(Locks, FaultyLink)],
    network: &Arc<Network>,
    forces: Option<tokio::sync::mpsc::UnboundedSender<&'static str>>,
) {
    let pauses: Vec<(String, Arc<Mutex<Option<Instant>>>)> = clients
        .iter()
        .map(|(locks, link)| (locks.client_id().to_owned(), link.pause_handle()))
        .collect();
    let network = Arc::clone(network);
    store.delay_hand_over_notices(Arc::new(
        move |name: &str, owner: &Owner, handed: &Handed| {
            network.ends.granted_token(
                handed.acquisition,
                handed.token,
                network.window,
                &network.trace,
            );
            if let Some(forces) = &forces
                && let Some(name) = operator::Operator::follows_hand_over(&network, name)
                && forces.send(name).is_err()
            {
                network
                    .trace
                    .note("the operator is gone; a hand-over is not followed up");
            }
            pauses
                .iter()
                .find(|(client, _)| owner.as_str().starts_with(client.as_str()))
                .map_or(Duration::ZERO, |(_, paused)| {
                    crate::faults::Seeded::notice_delay(&network, paused)
                })
        },
    ));
}

fn outcome(ledger: &Ledger, trace: &Trace, store: &MemoryBackend) -> Outcome {
    Outcome {
        violation: ledger.violation(),
        digest: trace.digest(),
        latest: trace.latest(),
        hand_overs: store.hand_overs(),
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
    let available = store.semaphores().available(plain).await.unwrap_or(-1);
    if available != PERMITS.cast_signed() {
        return Err(format!(
            "PERMITS LOST: {available} of {PERMITS} plain permits available at the end"
        ));
    }
    let expirable = store.expirable_semaphores();
    let (available, issued) = expirable.permits(leased).await.unwrap_or((-1, 0));
    if available != PERMITS.cast_signed() || issued != 0 {
        return Err(format!(
            "PERMITS NOT BACK: {available} of {PERMITS} expirable permits available, \
             {issued} issued, at the end"
        ));
    }
    Ok(())
}
