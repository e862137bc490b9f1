//! [`Subscriptions`]: the registry of a client's channels, the one task that sends its
//! subscribe and unsubscribe requests in order, and the [`Listener`]s it hands out.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use foldhash::HashMap;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use tokio::time::Instant;

use super::{PubSub, Wake, report};
use crate::backend::DEFAULT_RETRY_WINDOW;
use crate::{Error, retry};

mod listener;
pub(crate) use listener::WakeHandle;
pub use listener::{Handed, Listener, WeakSubscriptions};

/// Channel -> (entry, number of live listeners).
type ChannelMap = HashMap<Arc<str>, (Arc<Entry>, usize)>;

#[derive(Debug, Clone)]
enum SubState {
    Pending,
    Ready,
    Failed(Error),
}

struct Entry {
    channel: Arc<str>,
    notify: Notify,
    /// Whether the server confirmed the subscription. A mutex and a `Notify` rather than
    /// a `watch` channel, which wakes its waiters in an order it picks at random:
    /// listeners confirmed together go on in the order they came, so that a simulated
    /// run replays exactly.
    state: Mutex<SubState>,
    settled: Notify,
    /// The latest hand-over announced on the channel, until its waiter takes it.
    handed: Mutex<Option<Handed>>,
}

impl Entry {
    fn new(channel: Arc<str>) -> Self {
        Self {
            channel,
            notify: Notify::new(),
            state: Mutex::new(SubState::Pending),
            settled: Notify::new(),
            handed: Mutex::new(None),
        }
    }

    /// Wakes one listener, or every one.
    fn wake(&self, wake: Wake) {
        match wake {
            Wake::One => self.notify.notify_one(),
            Wake::All => self.notify.notify_waiters(),
        }
    }

    /// Records the subscription's outcome and wakes those waiting for it.
    fn settle(&self, state: SubState) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = state;
        self.settled.notify_waiters();
    }

    /// The subscription's outcome, once it is known.
    async fn settled(&self) -> SubState {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            let state = self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            if !matches!(state, SubState::Pending) {
                return state;
            }
            settled.await;
        }
    }
}

enum Command {
    Subscribe(Arc<Entry>),
    Unsubscribe(Arc<str>),
    Resubscribe,
}

/// What the worker task needs. It is started on first use, on the caller's runtime, and
/// hands its parts back when it dies (its runtime shut down), so that the next listener
/// starts it again instead of waiting for a worker that is gone.
struct WorkerParts {
    commands: mpsc::UnboundedReceiver<Command>,
    /// Commands a dead worker left, in order, done first by the next one.
    backlog: VecDeque<Command>,
    pubsub: Arc<dyn PubSub>,
}

#[derive(Default)]
struct WorkerSlot {
    /// The parts while no worker runs.
    parts: Option<WorkerParts>,
    task: Option<JoinHandle<()>>,
}

struct Shared {
    channels: Mutex<ChannelMap>,
    commands: mpsc::UnboundedSender<Command>,
    worker: Mutex<WorkerSlot>,
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, ChannelMap> {
        // The map is only ever mutated in short critical sections that cannot panic
        // half-way, so a poisoned lock still guards a consistent map.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The registry of channel subscriptions of one client connection.
#[derive(Clone)]
pub struct Subscriptions {
    shared: Arc<Shared>,
}

impl fmt::Debug for Subscriptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscriptions")
            .field("channels", &self.shared.channels().len())
            .finish()
    }
}

impl Subscriptions {
    /// A registry that (un)subscribes through `pubsub`.
    #[must_use]
    pub fn new(pubsub: Arc<dyn PubSub>) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        Self {
            shared: Arc::new(Shared {
                channels: Mutex::new(HashMap::default()),
                commands,
                worker: Mutex::new(WorkerSlot {
                    parts: Some(WorkerParts {
                        commands: rx,
                        backlog: VecDeque::new(),
                        pubsub,
                    }),
                    task: None,
                }),
            }),
        }
    }

    /// Registers a listener on `channel`, subscribing it if it is the first.
    ///
    /// Returns once the subscription is confirmed. Must be called within a tokio runtime.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a listener dropped before it was confirmed gives its share back, and the
    /// last share's going unsubscribes the channel.
    pub async fn listen(&self, channel: &str) -> Result<Listener, Error> {
        self.start_worker()?;
        let entry = {
            let mut channels = self.shared.channels();
            if let Some((entry, count)) = channels.get_mut(channel) {
                *count += 1;
                Arc::clone(entry)
            } else {
                let name: Arc<str> = Arc::from(channel);
                let entry = Arc::new(Entry::new(Arc::clone(&name)));
                // Sent while the map is locked, so commands reach the worker in map order.
                let sent = self
                    .shared
                    .commands
                    .send(Command::Subscribe(Arc::clone(&entry)));
                if sent.is_err() {
                    // Nobody would ever confirm the subscription: fail instead of waiting.
                    return Err(Error::protocol("the subscription worker stopped"));
                }
                channels.insert(name, (Arc::clone(&entry), 1));
                entry
            }
        };
        let listener = Listener {
            entry,
            shared: Arc::clone(&self.shared),
        };
        match listener.entry.settled().await {
            SubState::Failed(err) => Err(err),
            _ => Ok(listener),
        }
    }

    /// A handle that delivers messages without keeping the registry alive, for a
    /// forwarding task owned by the registry's own [`PubSub`].
    #[must_use]
    pub fn downgrade(&self) -> WeakSubscriptions {
        WeakSubscriptions(Arc::downgrade(&self.shared))
    }

    /// The entry of `channel`, while it has listeners.
    fn entry(&self, channel: &str) -> Option<Arc<Entry>> {
        self.shared
            .channels()
            .get(channel)
            .map(|(e, _)| Arc::clone(e))
    }

    /// Delivers a message received on `channel`.
    pub fn deliver(&self, channel: &str, wake: Wake) {
        if let Some(entry) = self.entry(channel) {
            entry.wake(wake);
        }
    }

    /// Delivers a hand-over announced for a waiter listening on `channel`: the store made
    /// `handed.acquisition` the holder (see [`Handed`]). Kept for that waiter to take
    /// ([`Listener::take_handed`]), and `wake` says whom to wake: one listener where the
    /// message reached the one client whose waiter it names, every one where the
    /// registry is shared by several clients.
    pub fn deliver_handed(&self, channel: &str, handed: Handed, wake: Wake) {
        if let Some(entry) = self.entry(channel) {
            *entry.handed.lock().unwrap_or_else(PoisonError::into_inner) = Some(handed);
            entry.wake(wake);
        }
    }

    /// Tells the registry that the transport reconnected: every channel is subscribed
    /// again, then every listener is woken to re-poll.
    pub fn reconnected(&self) {
        crate::metrics::reconnected(crate::metrics::Connection::Notifications);
        self.resubscribe();
    }

    /// Subscribes every channel again, then wakes every listener to re-poll.
    fn resubscribe(&self) {
        // The receiver lives in the registry (or with its running worker) as long as the
        // registry does, so this send cannot fail while `self` exists.
        let _ = self.shared.commands.send(Command::Resubscribe);
    }

    /// The transport's notification connection broke (reported through `tracing`); call
    /// [`Subscriptions::reconnected`] once a new one is up. Waiters fall back to the
    /// holders' leases meanwhile.
    pub fn connection_lost(&self) {
        crate::metrics::connection_lost(crate::metrics::Connection::Notifications);
        report::notifications_lost();
    }

    /// Messages may have been dropped (a lagging reader): reported through `tracing`,
    /// and every listener re-polls as after a reconnect.
    pub fn messages_dropped(&self) {
        report::notifications_dropped();
        self.resubscribe();
    }

    /// Wakes every listener of every channel (for example when messages may have been
    /// dropped by a lagging receiver).
    pub fn wake_all(&self) {
        for (entry, _) in self.shared.channels().values() {
            entry.notify.notify_waiters();
        }
    }

    /// How many listeners `channel` has now.
    #[must_use]
    pub fn listeners(&self, channel: &str) -> usize {
        self.shared
            .channels()
            .get(channel)
            .map_or(0, |(_, count)| *count)
    }

    /// The channels that currently have listeners, sorted.
    #[must_use]
    pub fn channels(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .shared
            .channels()
            .keys()
            .map(ToString::to_string)
            .collect();
        names.sort();
        names
    }

    /// Starts the worker unless it runs.
    fn start_worker(&self) -> Result<(), Error> {
        let mut slot = self
            .shared
            .worker
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if slot.task.as_ref().is_some_and(|task| !task.is_finished()) {
            return Ok(());
        }
        let Some(parts) = slot.parts.take() else {
            // A dead worker hands its parts back as it is dropped, before its task
            // counts as finished; parts missing here mean they were lost for good.
            return Err(Error::protocol("the subscription worker stopped"));
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            slot.parts = Some(parts);
            return Err(Error::NoRuntime);
        };
        if slot.task.take().is_some() {
            report::subscription_worker_restarted();
        }
        let worker = Worker {
            parts: Some(parts),
            current: None,
            shared: Arc::downgrade(&self.shared),
        };
        slot.task = Some(runtime.spawn(worker.run()));
        Ok(())
    }
}

/// The running worker. Dropped (its task ended or was dropped with its runtime), it hands
/// its parts back to the registry and fails the subscription it was confirming, so that
/// its listener tries again rather than waiting forever.
struct Worker {
    parts: Option<WorkerParts>,
    /// The subscription being confirmed.
    current: Option<Arc<Entry>>,
    shared: std::sync::Weak<Shared>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Listeners waiting for a confirmation fail now and subscribe again (a
        // connection-kind failure is retried), which starts a new worker: nobody else
        // would, and they would wait forever.
        let fail = |entry: &Entry| {
            let stopped = Error::connection(
                "subscribing to release notifications",
                "the subscription worker stopped before the server confirmed",
            );
            entry.settle(SubState::Failed(stopped));
        };
        if let Some(entry) = self.current.take() {
            fail(&entry);
        }
        if let Some(parts) = self.parts.as_mut() {
            let mut left = std::mem::take(&mut parts.backlog);
            while let Ok(command) = parts.commands.try_recv() {
                left.push_back(command);
            }
            left.retain(|command| match command {
                Command::Subscribe(entry) => {
                    fail(entry);
                    false
                }
                Command::Unsubscribe(_) | Command::Resubscribe => true,
            });
            parts.backlog = left;
        }
        if let (Some(parts), Some(shared)) = (self.parts.take(), self.shared.upgrade()) {
            shared
                .worker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .parts = Some(parts);
        }
    }
}

impl Worker {
    async fn run(mut self) {
        loop {
            let Some(parts) = self.parts.as_mut() else {
                return;
            };
            let command = match parts.backlog.pop_front() {
                Some(command) => command,
                None => match parts.commands.recv().await {
                    Some(command) => command,
                    None => return,
                },
            };
            let pubsub = Arc::clone(&parts.pubsub);
            self.handle(command, &*pubsub).await;
        }
    }

    async fn handle(&mut self, command: Command, pubsub: &dyn PubSub) {
        match command {
            Command::Subscribe(entry) => {
                self.current = Some(Arc::clone(&entry));
                // A connection lost under the request (killed, then connected again)
                // leaves the subscription unknown, as it does a lock request: it is
                // sent again within the same window, so that a waiter does not fail
                // for a reconnection the client rides out.
                let until = Instant::now() + DEFAULT_RETRY_WINDOW;
                let subscribed =
                    retry::until_answered(until, || pubsub.subscribe(&entry.channel)).await;
                let state = match subscribed {
                    Ok(()) => SubState::Ready,
                    Err(err) => SubState::Failed(err),
                };
                self.current = None;
                entry.settle(state);
            }
            Command::Unsubscribe(channel) => {
                // A failure leaves a subscription nobody listens to; the connection is
                // likely gone, and with it the subscription.
                if let Err(err) = pubsub.unsubscribe(&channel).await {
                    report::unsubscribe_failed(&channel, &err);
                }
            }
            Command::Resubscribe => {
                let Some(shared) = self.shared.upgrade() else {
                    return;
                };
                let entries: Vec<Arc<Entry>> = shared
                    .channels()
                    .values()
                    .map(|(e, _)| Arc::clone(e))
                    .collect();
                let mut failed = 0;
                for entry in &entries {
                    // If this fails the connection dropped again and another reconnect
                    // event follows; waiters are still bounded by the lock's ttl.
                    if let Err(err) = pubsub.subscribe(&entry.channel).await {
                        report::subscribe_failed(&entry.channel, &err);
                        failed += 1;
                    }
                }
                report::resubscribed(entries.len(), failed);
                for entry in &entries {
                    entry.notify.notify_waiters();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
