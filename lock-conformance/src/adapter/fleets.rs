//! Mixed fleets: our clients, which hand locks over on the server, beside peers that run
//! Redisson's own scripts (`RedissonLock`, `RedissonFairLock`, `RedissonWriteLock`) or
//! follow only Redisson's layout, on a mutex, a fair lock and a read-write lock's write
//! side.

use crate::timing::{ms, secs};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Guard, Lock, Locks};
use lock_testkit::RedisServer;
use tokio::time::Instant;

use super::contender::Contender;
use super::late_listener::LateListener;
use super::peers::{FairPeer, Peer, PeerStyle};
use super::redisson_process::RedissonProcess;
use super::{AdapterConnect, ConnectSpec};

/// Mixed fleets: two clients of ours, a peer that runs Redisson's own lock and unlock
/// scripts, and a peer that follows only Redisson's layout (a hash under the name, `0`
/// on `redisson_lock__channel:{name}` when it lets go) take turns on one mutex, each
/// holding it a few milliseconds at a time. Nobody holds it beside anybody else, and
/// nobody waits a second for one turn: each side wakes the other (a missed wake-up would
/// cost a peer the 30 s lease it saw, and one of ours a third of its place).
pub async fn mixed_fleets_keep_exclusion_and_wake_each_other(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:m";
    let fleet = Fleet::new(20);
    fleet
        .join_ours(connect, &server, 2, |ours| ours.mutex(name))
        .await;
    for (style, who) in [
        (PeerStyle::Redisson, "Redisson"),
        (PeerStyle::LayoutOnly, "layout-only"),
    ] {
        fleet.join(who, Peer::connect(&server, name, style).await);
    }
    fleet.finish().await;
}

/// Our clients and a Redisson fair-lock peer take turns on one fair lock, each holding it
/// a few milliseconds at a time. Nobody holds it beside anybody else, and nobody waits a
/// second for one turn: a release of ours tells a Redisson head on its channel (it has
/// no entry to be handed the lock by), and a Redisson release tells our head on its own
/// (a missed wake-up would cost the peer the time it was told to wait, and one of ours a
/// third of its place).
pub async fn mixed_fleets_share_a_fair_lock(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:f";
    let fleet = Fleet::new(15);
    fleet
        .join_ours(connect, &server, 2, |ours| ours.fair_mutex(name))
        .await;
    fleet.join("Redisson", FairPeer::connect(&server, name).await);
    fleet.finish().await;
}

/// Three clients of ours and a Redisson process with three workers (one subscription to
/// the lock's channel for all of them, one worker woken per `0` it hears, every other
/// message ignored, as Redisson's `LockPubSub` does) take turns on one mutex. Nobody
/// holds it beside anybody else, and nobody waits 5 s for one turn: a release that
/// hands the lock to one of our waiters must not leave the Redisson workers asleep for
/// the lease they saw (issue 48 saw waits of 1.1-4.1 s and about 5 % of the turns with
/// the npm `node-redisson` client).
pub async fn mixed_fleets_share_a_mutex_with_a_redisson_process(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:p";
    let mut fleet = Fleet::new(40);
    // Every release tells everybody (a Redisson process listens), and the process wakes
    // one of its workers per message: turns are a race, and on a loaded machine one may
    // take a second or two. A lease (30 s) is what must never be waited out.
    fleet.longest_turn = secs(5);
    fleet
        .join_ours(connect, &server, 3, |ours| ours.mutex(name))
        .await;
    let process = RedissonProcess::connect(&server, name).await;
    for _ in 0..3 {
        fleet.join("a Redisson process's worker", process.worker());
    }
    fleet.finish().await;
}

/// Three clients of ours and three peers that speak Redisson's protocol the way the npm
/// `node-redisson` client does (each listens on the lock's channel only while it sleeps
/// after a failed try; see `late_listener`) take turns on one mutex. Nobody holds it
/// beside anybody else, and each side gets at least half its fair share of the turns:
/// a release of ours that finds more listeners than our registered clients offers the
/// lock to the others first. (Before, our faster clients won every race and a hand-over
/// skipped a peer between its try and its subscription: the npm client got 3 % of the
/// turns, and waited up to 30 s.)
pub async fn mixed_fleets_give_late_listeners_their_share(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:l";
    let mut fleet = Fleet::new(40);
    fleet.longest_turn = secs(5);
    fleet.least_share = Some(0.5);
    // A late listener that tries just before the last release of the run, and subscribes
    // just after it, hears nothing more: it sleeps the PTTL it saw, by its own protocol,
    // whoever released. Short leases keep that tail under the bound; what the scenario
    // guards (a peer skipped by our hand-overs) shows in its share of the turns.
    let lease = secs(1);
    fleet.watchdog_lease = Some(lease);
    fleet
        .join_ours(connect, &server, 3, |ours| ours.mutex(name))
        .await;
    for _ in 0..3 {
        let peer = LateListener::connect(&server, name, lease).await;
        fleet.join("a late listener", peer);
    }
    fleet.finish().await;
}

/// Our writers and a Redisson writer take turns on one read-write lock, each holding it a
/// few milliseconds at a time. Nobody holds it beside anybody else, and nobody waits a
/// second for one turn: while the Redisson writer listens on the lock's channel a release
/// of ours hands nothing over and tells everybody (`1`), and a Redisson release tells
/// our writers on the same channel.
pub async fn mixed_fleets_share_a_write_lock(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:w";
    let fleet = Fleet::new(15);
    fleet
        .join_ours(connect, &server, 2, |ours| ours.rw_lock(name).writer())
        .await;
    let writer = Peer::connect(&server, name, PeerStyle::RedissonWriter).await;
    fleet.join("Redisson", writer);
    fleet.finish().await;
}

/// A mixed fleet: contenders that take turns on one lock, each holding it a few
/// milliseconds at a time in a critical section they share.
struct Fleet {
    rounds: usize,
    /// The longest anybody may wait for one turn.
    longest_turn: Duration,
    /// The watchdog lease of our clients (`None`: the default, 30 s).
    watchdog_lease: Option<Duration>,
    /// The least share of the turns each kind of contender must get while all of them
    /// take turns, as a fraction of its fair share (its contenders' part of all).
    least_share: Option<f64>,
    section: Arc<Section>,
    turns: std::sync::Mutex<Vec<(&'static str, tokio::task::JoinHandle<Turns>)>>,
}

/// One contender's turns: the longest wait for one, when each was taken, and when the
/// last ended.
struct Turns {
    longest: Duration,
    taken: Vec<Instant>,
    finished: Instant,
}

impl Fleet {
    fn new(rounds: usize) -> Self {
        Self {
            rounds,
            longest_turn: secs(1),
            watchdog_lease: None,
            least_share: None,
            section: Arc::new(Section::default()),
            turns: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Starts the turns of `clients` clients of ours on `server`, each through the
    /// handle `handle` makes from it.
    async fn join_ours(
        &self,
        connect: &AdapterConnect,
        server: &RedisServer,
        clients: usize,
        handle: impl Fn(&Locks) -> Lock,
    ) {
        for _ in 0..clients {
            let backend = connect(ConnectSpec::new(server.url())).await.unwrap();
            let ours = match self.watchdog_lease {
                Some(lease) => Locks::builder(backend)
                    .watchdog_lease(lease)
                    .build()
                    .unwrap(),
                None => Locks::new(backend),
            };
            let lock = handle(&ours);
            self.join("ours", Ours::new(ours, lock));
        }
    }

    /// Starts `contender`'s turns; each one's wait is timed.
    fn join(&self, who: &'static str, mut contender: impl Contender) {
        let (rounds, section) = (self.rounds, Arc::clone(&self.section));
        let turns = tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            let mut taken = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let asked = Instant::now();
                contender.take().await;
                taken.push(Instant::now());
                longest = longest.max(asked.elapsed());
                section.enter_and_leave().await;
                contender.give_back().await;
                tokio::time::sleep(ms(1)).await;
            }
            Turns {
                longest,
                taken,
                finished: Instant::now(),
            }
        });
        self.turns.lock().unwrap().push((who, turns));
    }

    /// Waits for every contender's turns: nobody held the lock beside anybody else, and
    /// nobody waited the fleet's longest turn (a second unless it says otherwise) for one
    /// turn (a missed wake-up would cost a peer the PTTL it saw, and one of ours a third
    /// of its place).
    async fn finish(self) {
        let handles = std::mem::take(&mut *self.turns.lock().unwrap());
        let mut all = Vec::with_capacity(handles.len());
        for (who, turns) in handles {
            let turns = tokio::time::timeout(secs(60), turns)
                .await
                .expect("every contender finishes its rounds")
                .unwrap();
            assert!(
                turns.longest < self.longest_turn,
                "{who} waited {:?} for one turn",
                turns.longest
            );
            all.push((who, turns));
        }
        if let Some(least) = self.least_share {
            assert_fair_shares(&all, least);
        }
        assert_eq!(
            self.section
                .overlaps
                .load(std::sync::atomic::Ordering::SeqCst),
            0
        );
    }
}

/// Asserts that each kind of contender got at least `least` of its fair share of the
/// turns taken until the first contender had taken all of its own (after that, fewer
/// contend).
fn assert_fair_shares(all: &[(&'static str, Turns)], least: f64) {
    let Some(first_done) = all.iter().map(|(_, turns)| turns.finished).min() else {
        return;
    };
    let mut kinds: Vec<(&str, usize, usize)> = Vec::new();
    for (who, turns) in all {
        let taken = turns.taken.iter().filter(|at| **at <= first_done).count();
        match kinds.iter_mut().find(|(kind, _, _)| kind == who) {
            Some((_, contenders, turns)) => {
                *contenders += 1;
                *turns += taken;
            }
            None => kinds.push((who, 1, taken)),
        }
    }
    let contenders: usize = kinds.iter().map(|(_, contenders, _)| contenders).sum();
    let turns: usize = kinds.iter().map(|(_, _, turns)| turns).sum();
    for (who, its_contenders, its_turns) in &kinds {
        #[allow(clippy::cast_precision_loss, reason = "counts of a few hundred")]
        let (share, fair) = (
            *its_turns as f64 / turns as f64,
            *its_contenders as f64 / contenders as f64,
        );
        assert!(
            share >= least * fair,
            "{who} got {its_turns} of {turns} turns ({:.0} %, its fair share {:.0} %): {kinds:?}",
            share * 100.0,
            fair * 100.0
        );
    }
}

/// A client of ours, through one of its lock handles.
struct Ours {
    _locks: Locks,
    lock: Lock,
    guard: Option<Guard>,
}

impl Ours {
    fn new(locks: Locks, lock: Lock) -> Self {
        Self {
            _locks: locks,
            lock,
            guard: None,
        }
    }
}

impl Contender for Ours {
    async fn take(&mut self) {
        self.guard = Some(self.lock.lock().await.unwrap());
    }

    async fn give_back(&mut self) {
        let guard = self.guard.take().expect("taken before");
        guard.unlock().await.unwrap();
    }
}

impl Contender for Peer {
    async fn take(&mut self) {
        self.lock().await;
    }

    async fn give_back(&mut self) {
        self.unlock().await;
    }
}

impl Contender for FairPeer {
    async fn take(&mut self) {
        self.lock().await;
    }

    async fn give_back(&mut self) {
        self.unlock().await;
    }
}

/// The critical section the contenders share: entering while another is inside is an
/// overlap.
#[derive(Debug, Default)]
struct Section {
    inside: std::sync::atomic::AtomicBool,
    overlaps: std::sync::atomic::AtomicUsize,
}

impl Section {
    async fn enter_and_leave(&self) {
        use std::sync::atomic::Ordering;
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(ms(3)).await;
        self.inside.store(false, Ordering::SeqCst);
    }
}
