//! [`MysqlBackend`]: lock-core's [`Backend`] on MySQL or MariaDB.
//!
//! Every lock kind is the protocol's state machine (lock-core's `protocol` module), one
//! per name (a read-write lock's two sides share it), kept as bytes in the name's row and stepped in the client
//! inside a transaction that holds the row's lock (see [`crate::store`]). The grant
//! rules are therefore lock-core's own, not a copy in SQL: the store adds only the
//! server's clock, the row, and the notices of hand-overs.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::machine::{self, Machine};
use lock_core::backend::{
    Acquire, AcquireRequest, Backend, Capabilities, HoldModel, LockKind, LockRef, LockState,
    Release, ReleaseRequest, Renewal, RequestId,
};
use lock_core::notify::Listener;
use lock_core::protocol::{Event, HandOver, Reply, Step};
use lock_core::{Error, Introspect, Owner};

use crate::mailbox::{Ask, Mailbox, Notice};
use crate::notify::Notifications;
use crate::state::State;
use crate::store::{Serving, Store};

/// A MySQL or MariaDB lock store. Build one with [`crate::Connector`].
#[derive(Debug)]
pub struct MysqlBackend {
    pub(crate) store: Store,
    pub(crate) notifications: Notifications,
}

impl MysqlBackend {
    /// What the backend declares: the mutex, the fair lock and the read-write lock, with
    /// fencing tokens, retry-safe requests and hand-overs; holds end after their lease.
    pub const CAPABILITIES: Capabilities = Capabilities::new(HoldModel::Lease)
        .fair(true)
        .read_write(true)
        .fencing(true)
        .retry_safe(true)
        .shared(true)
        .hands_over(true)
        .introspection(true);

    /// The channels this client's waiters listen on now (for tests and diagnostics).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.notifications.subscriptions().channels()
    }

    /// The table prefix this client uses.
    #[must_use]
    pub fn table_prefix(&self) -> &str {
        self.store.tables().prefix()
    }
}

/// The channel a waiter for `name` of `owner` listens on: one per mutex, one per fair
/// waiter's owner (a fair lock's waiters are woken each on their own), one per
/// read-write lock (whose notices wake every listener: its readers read together; see
/// [`crate::notify`]).
fn channel(kind: LockKind, name: &str, owner: &Owner) -> String {
    match kind {
        LockKind::Fair => format!("fair:{}:{}:{name}", owner.as_str().len(), owner.as_str()),
        LockKind::Read | LockKind::Write => format!("{READ_WRITE_CHANNEL}{name}"),
        _ => format!("mutex:{name}"),
    }
}

/// How a read-write lock's channel begins.
pub(crate) const READ_WRITE_CHANNEL: &str = "rw:";

/// The notice of a hand-over of `name` to a waiter.
fn handed(kind: LockKind, name: &str, hand_over: &HandOver<RequestId, Owner, Ask>) -> Notice {
    let ask = hand_over.ask;
    Notice {
        mailbox: ask.mailbox,
        channel: channel(kind, name, &hand_over.owner),
        handed: Some((
            hand_over.id,
            ask.attempt,
            ask.fencing.then_some(hand_over.token),
        )),
    }
}

/// The notice that wakes the first waiter of a lock that came free with nobody handed
/// it (a force-release, a cancellation), if one waits.
fn wake_first(kind: LockKind, name: &str, machine: &Machine<Ask>) -> Option<Notice> {
    if machine.is_held() {
        return None;
    }
    let (owner, ask) = machine.first_waiting()?;
    Some(Notice {
        mailbox: ask.mailbox,
        channel: channel(kind, name, owner),
        handed: None,
    })
}

/// Who held the lock before a step: anyone, and a writer (an exclusive holder).
#[derive(Debug, Clone, Copy)]
struct Before {
    held: bool,
    written: bool,
}

impl Before {
    fn of(machine: &Machine<Ask>) -> Self {
        Self {
            held: machine.is_held(),
            written: machine.holder().is_some(),
        }
    }
}

/// The notices a step sends: a hand-over's, or a wake-up for the first waiter of a lock
/// it freed with nobody handed it; and, when a read-write lock's writer stopped writing
/// with nobody handed the lock, a wake-up for every client whose readers wait.
fn notices(
    (kind, name): (LockKind, &str),
    before: Before,
    step: &Step<RequestId, Owner, Ask>,
    (state, clock): (&mut State, u64),
) -> Vec<Notice> {
    let machine = &state.machine;
    let mut notices = match &step.handed {
        Some(hand_over) => vec![handed(kind, name, hand_over)],
        None if before.held => wake_first(kind, name, machine).into_iter().collect(),
        None => Vec::new(),
    };
    if step.handed.is_none() && before.written && machine.holder().is_none() {
        let channel = format!("{READ_WRITE_CHANNEL}{name}");
        for mailbox in state.take_readers_waiting(clock) {
            if notices.iter().all(|notice| notice.mailbox != mailbox) {
                notices.push(Notice {
                    mailbox,
                    channel: channel.clone(),
                    handed: None,
                });
            }
        }
    }
    notices
}

/// A new machine for a name whose row is made at `clock` on the server `serving` names:
/// its tokens begin at the microseconds since the epoch, so that they go on rising past
/// a counter a restore from a backup took back; its leases are at most `quarantine`, the
/// failover quarantine.
///
/// A mutex's waiters are served in arrival order, as a fair lock's (the machine's fair
/// rules for both kinds, as PostgreSQL's mutex and fair lock share one queue): a free
/// mutex goes to its first waiter before a newcomer. The machine's other mutex rules
/// exist for clients of other libraries that listen without registering (Redisson's),
/// which MySQL has none of, and which a store that keeps no listeners could not count.
fn fresh(clock: u64, serving: Serving, quarantine: Duration) -> State {
    let machine = machine::new_machine(
        LockKind::Fair,
        Some(quarantine),
        quarantine,
        (clock, clock, 0),
    );
    State::fresh(machine, serving)
}

impl MysqlBackend {
    /// Runs `event` on `lock`'s machine (a new one when `create` and the name has none)
    /// and answers with `answer` of the reply; the notices of a hand-over, or of a lock
    /// freed for its first waiter, go out with the commit.
    ///
    /// A reader that `waits` (its client's mailbox, and how long it keeps its place) and
    /// is answered busy is kept to be woken when the writer stops writing.
    async fn step<R, F>(
        &self,
        lock: &LockRef,
        (event, retention, create): (Event<RequestId, Owner, Ask>, Duration, bool),
        (during, waits): (&'static str, Option<(Mailbox, u64)>),
        answer: F,
    ) -> Result<R, Error>
    where
        R: Send + 'static,
        F: Fn(Option<&Machine<Ask>>, Option<Reply<RequestId>>, u64) -> R + Send + Sync + 'static,
    {
        let (kind, name) = (lock.kind, lock.name.as_str().to_owned());
        let quarantine = self.store.quarantine();
        let (reader_waiting, place) = match waits {
            Some((mailbox, place)) if kind == LockKind::Read => (Some(mailbox), place),
            _ => (None, 0),
        };
        self.store
            .transact_one(&name.clone(), during, move |slot, clock| {
                if slot.state.is_none() && create {
                    slot.state = Some(fresh(clock, slot.serving, quarantine));
                }
                let Some(state) = slot.state.as_mut() else {
                    return (answer(None, None, clock), Vec::new());
                };
                machine::bring_to(&mut state.machine, clock, retention);
                let before = Before::of(&state.machine);
                let step = state.machine.step(event.clone());
                if let Some(mailbox) = reader_waiting.filter(|_| step.reply == Reply::Busy) {
                    state.reader_waits(mailbox, (clock, clock.saturating_add(place)));
                }
                if matches!(kind, LockKind::Read | LockKind::Write) {
                    state.read_write = true;
                }
                let notices = notices((kind, &name), before, &step, (state, clock));
                (
                    answer(Some(&state.machine), Some(step.reply), clock),
                    notices,
                )
            })
            .await
    }
}

#[async_trait]
impl Backend for MysqlBackend {
    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let mailbox = self.notifications.mailbox();
        let ask = Ask {
            mailbox,
            attempt: request.wait.map_or(0, |wait| wait.attempt),
            fencing: request.fencing,
        };
        let event = machine::attempt(lock, &request, ask);
        let retention = request.retry_window.saturating_mul(2);
        let waits = request
            .wait
            .map(|wait| (mailbox, machine::ticks(wait.place_kept_for)));
        let target = lock.clone();
        self.step(
            lock,
            (event, retention, true),
            ("acquiring a lock", waits),
            move |machine, reply, clock| match (machine, reply) {
                (Some(machine), Some(reply)) => {
                    machine::acquire_answer(machine, (&target, &request), reply, clock)
                }
                _ => Ok(Acquire::Ended),
            },
        )
        .await?
    }

    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        let event = Event::Cancel {
            id: acquisition.id,
            owner: lock.owner.clone(),
        };
        let retention = acquisition.retry_window.saturating_mul(2);
        self.step(
            lock,
            (event, retention, false),
            ("giving up a wait", None),
            |_, _, _| (),
        )
        .await
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        let quarantine = self.store.quarantine();
        let name = lock.name.as_str().to_owned();
        self.store
            .transact_one(&name, "raising a fencing token", move |slot, clock| {
                let serving = slot.serving;
                let state = slot
                    .state
                    .get_or_insert_with(|| fresh(clock, serving, quarantine));
                state.machine.raise_token(token);
                ((), Vec::new())
            })
            .await
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        let event = machine::release(lock, request.grant, request.lease);
        let (kind, name) = (lock.kind, lock.name.as_str().to_owned());
        let (retention, kept_for) = (
            request.retry_window.saturating_mul(2),
            machine::ticks(request.retry_window),
        );
        self.store
            .transact_one(&name.clone(), "releasing a lock", move |slot, clock| {
                let Some(state) = slot.state.as_mut() else {
                    return (Release::NotHeld, Vec::new());
                };
                // A release sent again answers as the first time, and changes nothing.
                if let Some(answer) = state.answered(request.id, clock) {
                    return (answer, Vec::new());
                }
                machine::bring_to(&mut state.machine, clock, retention);
                let before = Before::of(&state.machine);
                let step = state.machine.step(event.clone());
                let notices = notices((kind, &name), before, &step, (state, clock));
                if request.settled {
                    state.machine.forget_settled(request.grant);
                }
                if let Some(earlier) = request.answered_before {
                    state.forget_answer(earlier);
                }
                let answer = machine::release_answer(step.reply);
                let until = clock.saturating_add(kept_for);
                state.remember(request.id, answer, (clock, until));
                (answer, notices)
            })
            .await
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let names = locks
            .iter()
            .map(|lock| lock.name.as_str().to_owned())
            .collect();
        let owners: Vec<(String, LockRef)> = locks
            .iter()
            .map(|lock| (lock.name.as_str().to_owned(), lock.clone()))
            .collect();
        let renewed = self
            .store
            .transact(names, "renewing leases", move |slots, clock| {
                let renewals = owners
                    .iter()
                    .map(|(name, lock)| {
                        let state = slots
                            .iter_mut()
                            .find(|slot| slot.name == *name)
                            .and_then(|slot| slot.state.as_mut());
                        let Some(machine) = state.map(|state| &mut state.machine) else {
                            return Renewal::Gone;
                        };
                        let elapsed = clock.saturating_sub(machine.now());
                        machine.step(Event::Elapse(elapsed));
                        match machine.step(machine::renew(lock, lease)).reply {
                            Reply::Renewed { origin } => Renewal::Renewed {
                                origin: Some(origin),
                            },
                            _ => Renewal::Gone,
                        }
                    })
                    .collect::<Vec<_>>();
                (renewals, Vec::new())
            })
            .await;
        renewed.unwrap_or_else(|err| locks.iter().map(|_| Renewal::Failed(err.clone())).collect())
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let state = self
            .store
            .read(lock.name.as_str(), "inspecting a lock")
            .await?;
        Ok(state
            .and_then(|(state, clock)| machine::inspect(&state.machine, lock, clock))
            .map_or_else(LockState::default, |(holds, left)| {
                LockState::new(true, holds, Some(left))
            }))
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let retention = lock_core::backend::DEFAULT_RETRY_WINDOW.saturating_mul(2);
        self.step(
            lock,
            (machine::force_release(lock), retention, false),
            ("force-releasing a lock", None),
            |_, reply, _| reply == Some(Reply::Forced(true)),
        )
        .await
    }

    fn introspection(&self) -> &dyn Introspect {
        self
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        self.notifications
            .listen(&channel(lock.kind, lock.name.as_str(), &lock.owner))
            .await
    }

    fn listener_at_hand(&self, lock: &LockRef) -> Option<Listener> {
        // Most acquisitions find nothing subscribed: they build no channel name.
        if self.notifications.subscriptions().is_empty() {
            return None;
        }
        self.notifications
            .listening(&channel(lock.kind, lock.name.as_str(), &lock.owner))
    }
}
