//! Mutexes and fair locks: the memory store executes the protocol's state machine
//! ([`crate::protocol::Name`]), one per name, and adds only what a store adds around it:
//! its clock, the sleep it suggests to a busy caller, the channels it tells, its
//! statistics, and forgetting a name that holds nothing.

use std::time::Duration;

use tokio::time::Instant;

use super::handover::{Notice, Served};
use super::{Store, channel};
use crate::backend::machine::{self, Machine, span, ticks};
use crate::backend::{
    Acquire, AcquireRequest, LockKind, LockRef, Release, ReleaseRequest, RequestId,
};
use crate::notify::{Handed, Wake};
use crate::protocol::{Event, HandOver, Reply};
use crate::{LockInfo, LockName, Owner};

/// One mutex's (or fair lock's) state: the protocol's machine over the store's ids and
/// owners, keeping each waiting attempt for its hand-over's notice. Time counts
/// microseconds from the store's first request.
pub(super) type Exclusive = Machine<AcquireRequest>;

impl Store {
    /// The store's clock in the machine's time.
    fn clock(&mut self, now: Instant) -> u64 {
        let epoch = *self.epoch.get_or_insert(now);
        ticks(now.saturating_duration_since(epoch))
    }

    /// Applies `event` to `name`'s machine at `now` (a machine for a fair lock or a
    /// mutex, as `kind` says, when the name has none), then forgets the machine if it
    /// holds nothing.
    fn step(
        &mut self,
        name: &str,
        kind: LockKind,
        event: Event<RequestId, Owner, AcquireRequest>,
        now: Instant,
    ) -> crate::protocol::Step<RequestId, Owner, AcquireRequest> {
        let machine = self.machine(name, kind, now);
        let step = machine.step(event);
        self.settle(name);
        self.steps += 1;
        if self.steps.is_multiple_of(256) {
            self.sweep(now);
        }
        step
    }

    /// Brings every machine to `now` and forgets those that hold nothing: a name nobody
    /// asks for again would otherwise keep its machine for good.
    fn sweep(&mut self, now: Instant) {
        let names: Vec<String> = self.names.keys().cloned().collect();
        for name in names {
            self.machine(&name, LockKind::Mutex, now);
            self.settle(&name);
        }
    }

    /// `name`'s machine, brought to `now`; a new one when the name has none.
    fn machine(&mut self, name: &str, kind: LockKind, now: Instant) -> &mut Exclusive {
        let clock = self.clock(now);
        let quarantine = self.max_lease.unwrap_or(super::DEFAULT_FAILOVER_QUARANTINE);
        let until = self.quarantine_until.map_or(0, |until| {
            clock.saturating_add(ticks(until.saturating_duration_since(now)))
        });
        let token = self.tokens.get(name).copied().unwrap_or(0);
        let (retention, defect) = (self.retention, self.defect);
        let max_lease = self.max_lease;
        let machine = self.names.entry(name.to_owned()).or_insert_with(|| {
            machine::new_machine(kind, max_lease, quarantine, (clock, token, until))
                .with_defect(defect)
        });
        machine::bring_to(machine, clock, retention);
        machine
    }

    /// Forgets `name`'s machine once it holds nothing but its last token.
    fn settle(&mut self, name: &str) {
        if let Some(machine) = self.names.get(name).filter(|m| m.at_rest()) {
            let token = machine.last_token();
            self.names.remove(name);
            let kept = self.tokens.entry(name.to_owned()).or_insert(0);
            *kept = (*kept).max(token);
        }
    }

    /// Tells the machine of the mutex `lock` how many clients of other libraries wait
    /// for it: the listeners of its channel (`listening`) beyond its registered waiters
    /// (a client of ours listens once per lock, and one of its waiters registers at a
    /// time; one that is between its busy answer and its subscription is counted short,
    /// which only hands over where an offer was due, as on a server).
    pub(super) fn count_others(&mut self, lock: &LockRef, listening: usize, now: Instant) {
        if lock.kind != LockKind::Mutex || !self.names.contains_key(lock.name.as_str()) {
            return;
        }
        let machine = self.machine(lock.name.as_str(), lock.kind, now);
        let others = listening.saturating_sub(machine.waiting());
        machine.step(Event::Others(u32::try_from(others).unwrap_or(u32::MAX)));
    }

    /// Whether a mutex or fair lock holds `name` now, and for how long.
    pub(super) fn exclusively_held(&mut self, name: &str, now: Instant) -> Option<Duration> {
        let clock = self.clock(now);
        let holder = self.names.get(name)?.holder()?;
        (holder.expires > clock).then(|| span(holder.expires - clock))
    }

    /// Names held as a mutex or fair lock now.
    pub(super) fn exclusive_names(&mut self, now: Instant) -> Vec<String> {
        let clock = self.clock(now);
        self.names
            .iter()
            .filter(|(_, m)| m.holder().is_some_and(|h| h.expires > clock))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// An attempt of `request` on the mutex or fair lock `lock`.
    pub(super) fn acquire_exclusive(
        &mut self,
        lock: &LockRef,
        request: AcquireRequest,
        now: Instant,
    ) -> Result<Acquire, crate::Error> {
        let name = lock.name.as_str();
        self.retention = self.retention.max(request.retry_window.saturating_mul(2));
        // A read-write lock of the same name excludes it, as one key does on a server.
        if let Some(entry) = self.live(name, now) {
            return Ok(super::kinds::busy(entry, now));
        }
        let taking_up = self
            .names
            .get(name)
            .is_some_and(|m| m.handed_to(request.id));
        let event = machine::attempt(lock, &request, request);
        let reply = self.step(name, lock.kind, event, now).reply;
        if matches!(reply, Reply::Acquired { .. }) {
            self.hand_overs.taken_up += u64::from(taking_up);
        }
        let clock = self.clock(now);
        match self.names.get(name) {
            Some(machine) => machine::acquire_answer(machine, (lock, &request), reply, clock),
            // A name at rest (forgotten) answers no busy reply that needs its machine.
            None => {
                let rested = Exclusive::new(false, 0);
                machine::acquire_answer(&rested, (lock, &request), reply, clock)
            }
        }
    }

    /// The release `request` of a grant of `lock` (a mutex or a fair lock); a settled
    /// one leaves no record of its acquisition.
    pub(super) fn release_exclusive(
        &mut self,
        lock: &LockRef,
        request: &ReleaseRequest,
        now: Instant,
    ) -> (Release, Served) {
        let (name, grant) = (lock.name.as_str(), request.grant);
        if self.names.get(name).is_some_and(|m| m.handed_to(grant)) {
            self.hand_overs.released_before_taken_up += 1;
        }
        let event = machine::release(lock, grant, request.lease);
        let step = self.step(name, lock.kind, event, now);
        if request.settled
            && let Some(machine) = self.names.get_mut(name)
        {
            machine.forget_settled(grant);
        }
        let outcome = machine::release_answer(step.reply);
        let served = match step.handed {
            Some(hand_over) => Served::Handed(self.notice(lock, hand_over)),
            None if outcome == Release::Released => Served::Woken(self.wake_next(lock, now)),
            None => Served::Woken(None),
        };
        (outcome, served)
    }

    /// Acquisition `id` of `lock` gives up: the lock it frees goes to the next waiter.
    pub(super) fn cancel_exclusive(
        &mut self,
        lock: &LockRef,
        id: RequestId,
        now: Instant,
    ) -> Served {
        let name = lock.name.as_str();
        let held_before = self.exclusively_held(name, now).is_some();
        if self.names.get(name).is_some_and(|m| m.handed_to(id)) {
            self.hand_overs.given_back += 1;
        }
        let event = Event::Cancel {
            id,
            owner: lock.owner.clone(),
        };
        let step = self.step(name, lock.kind, event, now);
        match step.handed {
            Some(hand_over) => Served::Handed(self.notice(lock, hand_over)),
            // Freed by the cancellation, or free while clients of other libraries wait
            // (the cancelled waiter may have been the one a release woke).
            None if self.exclusively_held(name, now).is_none()
                && (held_before || self.others_wait(name, now)) =>
            {
                Served::Woken(self.wake_next(lock, now))
            }
            None => Served::Woken(None),
        }
    }

    /// Renews `lock`'s hold with `lease`: the grant that began the hold renewed, if
    /// there was one.
    pub(super) fn renew_exclusive(
        &mut self,
        lock: &LockRef,
        lease: Duration,
        now: Instant,
    ) -> Option<RequestId> {
        let name = lock.name.as_str();
        self.names.get(name)?;
        let event = machine::renew(lock, lease);
        match self.step(name, lock.kind, event, now).reply {
            Reply::Renewed { origin } => Some(origin),
            _ => None,
        }
    }

    /// Deletes `lock` whoever holds it: whether it was held, and who to wake.
    pub(super) fn force_release_exclusive(
        &mut self,
        lock: &LockRef,
        now: Instant,
    ) -> (bool, Option<(String, Wake)>) {
        if !self.names.contains_key(lock.name.as_str()) {
            return (false, None);
        }
        let reply = self
            .step(
                lock.name.as_str(),
                lock.kind,
                machine::force_release(lock),
                now,
            )
            .reply;
        if reply == Reply::Forced(true) {
            (true, self.wake_next(lock, now))
        } else {
            (false, None)
        }
    }

    /// `lock`'s holder as the caller sees it: whether it is held, its owner's holds, and
    /// the lease left.
    pub(super) fn inspect_exclusive(
        &mut self,
        lock: &LockRef,
        now: Instant,
    ) -> Option<(u32, Duration)> {
        let clock = self.clock(now);
        machine::inspect(self.names.get(lock.name.as_str())?, lock, clock)
    }

    /// Adds what the machine of `name` knows to `info`: its holder, how many wait, and
    /// the last token. Whether a mutex or fair lock of that name is held.
    pub(super) fn describe_exclusive(
        &mut self,
        name: &str,
        now: Instant,
        info: &mut LockInfo,
    ) -> bool {
        let clock = self.clock(now);
        self.names
            .get(name)
            .is_some_and(|machine| machine::describe(machine, (clock, false), info))
    }

    /// The notice of a hand-over of `lock`, for the waiter's client.
    fn notice(
        &mut self,
        lock: &LockRef,
        hand_over: HandOver<RequestId, Owner, AcquireRequest>,
    ) -> Notice {
        self.hand_overs.made += 1;
        let (channel, wake) = if lock.kind == LockKind::Fair {
            self.hand_overs.made_of_fair_locks += 1;
            (
                channel::fair_waiter(&lock.name, &hand_over.owner),
                Wake::One,
            )
        } else {
            (channel::mutex(&lock.name), Wake::One)
        };
        let attempt = hand_over.ask.wait.map_or(0, |wait| wait.attempt);
        let token = hand_over.ask.fencing.then_some(hand_over.token);
        Notice {
            channel,
            wake,
            handed: Handed::new(hand_over.id, attempt, token),
            owner: hand_over.owner,
            name: lock.name.as_str().to_owned(),
        }
    }

    /// Whether clients of other libraries wait for the mutex `name` (as last counted),
    /// or it is offered to them now.
    fn others_wait(&mut self, name: &str, now: Instant) -> bool {
        let clock = self.clock(now);
        self.names.get(name).is_some_and(|machine| {
            machine.others() > 0 || machine.offered_until().is_some_and(|until| until > clock)
        })
    }

    /// Who to wake when `lock` is free and nobody was handed it: a fair lock's first
    /// waiter; one waiter of a mutex, or every listener while clients of other
    /// libraries wait (each listener may be one of them; on a server every client
    /// hears the release).
    fn wake_next(&mut self, lock: &LockRef, now: Instant) -> Option<(String, Wake)> {
        if lock.kind != LockKind::Fair {
            let wake = if self.others_wait(lock.name.as_str(), now) {
                Wake::All
            } else {
                Wake::One
            };
            return Some((channel::mutex(&lock.name), wake));
        }
        let (owner, _) = self.names.get(lock.name.as_str())?.first_waiter()?;
        Some((channel::fair_waiter(&lock.name, owner), Wake::One))
    }

    /// Raises the token `name`'s next grant goes on from.
    pub(super) fn raise_token(&mut self, name: &LockName, token: u64) {
        if let Some(machine) = self.names.get_mut(name.as_str()) {
            machine.raise_token(token);
        }
        let counter = self.tokens.entry(name.as_str().to_owned()).or_insert(0);
        *counter = (*counter).max(token);
    }

    /// Plants `defect` back in every machine, and in those to come.
    #[cfg(feature = "mutants")]
    pub(super) fn plant(&mut self, defect: Option<crate::protocol::Defect>) {
        self.defect = defect;
        for machine in self.names.values_mut() {
            machine.plant(defect);
        }
    }

    /// Every machine's replica catches up.
    pub(super) fn replicate_exclusive(&mut self) {
        for machine in self.names.values_mut() {
            machine.step(Event::Replicate);
        }
    }

    /// Every machine fails over to its replica, at `now`.
    pub(super) fn fail_over_exclusive(&mut self, now: Instant) {
        let names: Vec<String> = self.names.keys().cloned().collect();
        for name in names {
            let kind = LockKind::Mutex;
            self.machine(&name, kind, now).step(Event::Failover);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::{Acquire, AcquireRequest, Backend, LockKind, LockRef, ReleaseRequest};
    use crate::memory::MemoryBackend;
    use crate::{LockName, Owner};

    async fn lock_and_release(store: &MemoryBackend, name: &str) {
        let lock = LockRef::new(
            LockKind::Mutex,
            LockName::new(name).expect("a valid name"),
            Owner::new("client", "holder"),
        );
        let request = AcquireRequest::new(std::time::Duration::from_millis(300));
        let reply = store.acquire(&lock, request).await.expect("answered");
        assert!(matches!(reply, Acquire::Acquired { .. }), "{reply:?}");
        let release = ReleaseRequest::new(request.lease, request.id);
        store.release(&lock, release).await.expect("released");
    }

    /// A name released and never asked for again keeps its machine only while its ids
    /// must be kept (two retry windows): the sweep forgets it, so that a service that
    /// locks ever new names does not grow without bound.
    #[tokio::test(start_paused = true)]
    async fn a_machine_that_holds_nothing_is_forgotten() {
        let store = MemoryBackend::new();
        lock_and_release(&store, "once").await;
        assert!(store.store().names.contains_key("once"), "its ids are kept");
        let window = AcquireRequest::new(std::time::Duration::ZERO).retry_window;
        tokio::time::sleep(window * 2 + std::time::Duration::from_millis(1)).await;
        for _ in 0..200 {
            lock_and_release(&store, "busy").await;
        }
        let names = store.store().names.len();
        assert!(
            !store.store().names.contains_key("once"),
            "{names} machines kept"
        );
    }

    fn mutex(owner: &str) -> LockRef {
        let name = LockName::new("offered").expect("a valid name");
        LockRef::new(LockKind::Mutex, name, Owner::new(owner, "holder"))
    }

    /// A client of another library listens on a mutex's channel and never registers (as
    /// the older protocol's clients do): a release offers it the lock instead of handing it to our
    /// registered waiter, whose attempt keeps back while the offer lasts; its try takes
    /// the lock. Without it, our waiter is handed the lock and the other waits on.
    #[tokio::test(start_paused = true)]
    async fn a_release_offers_the_lock_to_a_client_of_another_library() {
        let store = MemoryBackend::new();
        let lease = std::time::Duration::from_millis(300);
        let (holder, ours, theirs) = (mutex("a"), mutex("b"), mutex("c"));
        let held = AcquireRequest::new(lease);
        let reply = store.acquire(&holder, held).await.expect("answered");
        assert!(matches!(reply, Acquire::Acquired { .. }), "{reply:?}");
        let waiting = AcquireRequest::new(lease).enqueue(std::time::Duration::from_secs(5));
        let reply = store.acquire(&ours, waiting).await.expect("answered");
        assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");
        let _our_listener = store.listen(&ours).await.expect("listening");
        let _their_listener = store.listen(&theirs).await.expect("listening");
        let release = ReleaseRequest::new(lease, held.id);
        store.release(&holder, release).await.expect("released");
        assert_eq!(store.hand_overs().made, 0, "offered, not handed over");
        let reply = store.acquire(&ours, waiting).await.expect("answered");
        assert!(
            matches!(reply, Acquire::Busy { .. }),
            "ours keep back: {reply:?}"
        );
        let reply = store.acquire(&theirs, AcquireRequest::new(lease)).await;
        let reply = reply.expect("answered");
        assert!(matches!(reply, Acquire::Acquired { .. }), "{reply:?}");
    }
}
