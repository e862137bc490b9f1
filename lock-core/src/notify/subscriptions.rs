//! [`Subscriptions`]: the registry of a client's channels, the one task that sends its
//! subscribe and unsubscribe requests in order, and the [`Listener`]s it hands out.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use foldhash::HashMap;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use tokio::time::Instant;

use super::{PubSub, Wake, report};
use crate::backend::DEFAULT_RETRY_WINDOW;
use crate::{Error, retry};

mod entry;
mod listener;
use entry::{Entry, SubState};
pub(crate) use listener::WakeHandle;
pub use listener::{Handed, Listener, WeakSubscriptions};

/// Channel -> its subscription.
type ChannelMap = HashMap<Arc<str>, Channel>;

/// One channel's subscription in the registry.
struct Channel {
    entry: Arc<Entry>,
    /// Live listeners; none while the subscription lingers.
    listeners: usize,
    /// Since when the subscription has had no listener, while it lingers (see
    /// [`Subscriptions::lingering`]).
    idle_since: Option<Instant>,
}

enum Command {
    Subscribe(Arc<Entry>),
    Unsubscribe(Arc<str>),
    /// The channel's last listener left at this instant: it lingers from then on.
    Idle(Arc<str>, Instant),
    Resubscribe,
}

/// What the worker task needs. It is started on first use, on the caller's runtime, and
/// hands its parts back when it dies (its runtime shut down), so that the next listener
/// starts it again instead of waiting for a worker that is gone.
struct WorkerParts {
    commands: mpsc::UnboundedReceiver<Command>,
    /// Commands a dead worker left, in order, done first by the next one.
    backlog: VecDeque<Command>,
    /// Lingering channels by when they went idle, oldest first (one linger for all, so
    /// also by when they end). A channel listened to again since stays in until its
    /// turn, and is then left alone.
    lingering: VecDeque<(Arc<str>, Instant)>,
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
    /// How long a channel stays subscribed after its last listener left.
    linger: Duration,
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
    /// A registry that (un)subscribes through `pubsub`: a channel's last listener to go
    /// unsubscribes it.
    #[must_use]
    pub fn new(pubsub: Arc<dyn PubSub>) -> Self {
        Self::lingering(pubsub, Duration::ZERO)
    }

    /// A registry that keeps a channel subscribed for `linger` after its last listener
    /// left: a client whose waiters come back to the same name soon (a contended lock)
    /// finds it still subscribed, which spares the store an unsubscribe and a subscribe
    /// per wait, and lets a waiter listen before its first attempt (see
    /// [`Subscriptions::listening`]). Only for stores that never count subscribers as
    /// waiters: one whose release decides by how many listen would count a lingering
    /// subscription as a waiter.
    #[must_use]
    pub fn lingering(pubsub: Arc<dyn PubSub>, linger: Duration) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        Self {
            shared: Arc::new(Shared {
                channels: Mutex::new(HashMap::default()),
                commands,
                worker: Mutex::new(WorkerSlot {
                    parts: Some(WorkerParts {
                        commands: rx,
                        backlog: VecDeque::new(),
                        lingering: VecDeque::new(),
                        pubsub,
                    }),
                    task: None,
                }),
                linger,
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
            if let Some(known) = channels.get_mut(channel) {
                known.listeners += 1;
                known.idle_since = None;
                Arc::clone(&known.entry)
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
                let subscription = Channel {
                    entry: Arc::clone(&entry),
                    listeners: 1,
                    idle_since: None,
                };
                channels.insert(name, subscription);
                entry
            }
        };
        let listener = Listener {
            expecting: None,
            entry,
            shared: Arc::clone(&self.shared),
        };
        match listener.entry.settled().await {
            SubState::Failed(err) => Err(err),
            _ => Ok(listener),
        }
    }

    /// Whether no channel is subscribed (none listened to, none lingering): a caller
    /// that would build a channel's name only to ask [`Subscriptions::listening`] asks
    /// this first.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.shared.channels().is_empty()
    }

    /// A listener on `channel` at once, without a request, when the channel is
    /// subscribed and confirmed already (another waiter listens, or it lingers). Such a
    /// listener was listening before anything its caller sends next: a waiter may make
    /// its first attempt listening.
    #[must_use]
    pub fn listening(&self, channel: &str) -> Option<Listener> {
        // The worker ends lingers and sends a reconnection's subscriptions again: a
        // channel kept from a runtime that stopped needs it running again.
        self.start_worker().ok()?;
        let mut channels = self.shared.channels();
        let known = channels.get_mut(channel)?;
        if !matches!(known.entry.state(), SubState::Ready) {
            return None;
        }
        known.listeners += 1;
        known.idle_since = None;
        Some(Listener {
            expecting: None,
            entry: Arc::clone(&known.entry),
            shared: Arc::clone(&self.shared),
        })
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
            .map(|known| Arc::clone(&known.entry))
    }

    /// Delivers a message received on `channel`.
    pub fn deliver(&self, channel: &str, wake: Wake) {
        if let Some(entry) = self.entry(channel) {
            entry.wake(wake);
        }
    }

    /// Delivers a hand-over announced for a waiter listening on `channel`: the store made
    /// `handed.acquisition` the holder (see [`Handed`]). Kept for that waiter to take
    /// ([`Listener::take_handed`]). The waiter it names, when it waits listening here,
    /// is woken, and for [`Wake::One`] nobody else: several waiters of one lock may
    /// listen on one registry (the clients of one in-process store share theirs), and
    /// the store handed the lock to one of them. Otherwise `wake` says whom to wake (the
    /// waiter named may be about to listen: it finds its hold when it next asks).
    pub fn deliver_handed(&self, channel: &str, handed: Handed, wake: Wake) {
        if let Some(entry) = self.entry(channel) {
            *entry.handed.lock().unwrap_or_else(PoisonError::into_inner) = Some(handed);
            match entry.bell_of(handed.acquisition) {
                Some(bell) => {
                    bell.notify_one();
                    if wake == Wake::All {
                        entry.wake(wake);
                    }
                }
                None => entry.wake(wake),
            }
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
        for known in self.shared.channels().values() {
            known.entry.notify.notify_waiters();
        }
    }

    /// How many listeners `channel` has now.
    #[must_use]
    pub fn listeners(&self, channel: &str) -> usize {
        self.shared
            .channels()
            .get(channel)
            .map_or(0, |known| known.listeners)
    }

    /// The channels subscribed now (those with listeners, and those that linger),
    /// sorted.
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
                Command::Unsubscribe(_) | Command::Idle(..) | Command::Resubscribe => true,
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
            let linger = self.shared.upgrade().map_or(Duration::ZERO, |s| s.linger);
            let lingers_until = parts.lingering.front().map(|(_, since)| *since + linger);
            let command = match parts.backlog.pop_front() {
                Some(command) => command,
                None => {
                    let next = next_command(&mut parts.commands, lingers_until);
                    match next.await {
                        Next::Command(command) => command,
                        Next::LingerEnded => {
                            let pubsub = Arc::clone(&parts.pubsub);
                            if let Some((channel, since)) = parts.lingering.pop_front() {
                                self.linger_ended(&channel, since, &*pubsub).await;
                            }
                            continue;
                        }
                        Next::Closed => return,
                    }
                }
            };
            let pubsub = Arc::clone(&parts.pubsub);
            self.handle(command, &*pubsub).await;
        }
    }

    /// Unsubscribes `channel` if it still lingers from `since` (nobody listened since).
    async fn linger_ended(&self, channel: &Arc<str>, since: Instant, pubsub: &dyn PubSub) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        {
            let mut channels = shared.channels();
            match channels.get(channel) {
                Some(known) if known.listeners == 0 && known.idle_since == Some(since) => {
                    channels.remove(channel);
                }
                _ => return,
            }
        }
        if let Err(err) = pubsub.unsubscribe(channel).await {
            report::unsubscribe_failed(channel, &err);
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
            Command::Idle(channel, since) => {
                if let Some(parts) = self.parts.as_mut() {
                    parts.lingering.push_back((channel, since));
                }
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
                    .map(|known| Arc::clone(&known.entry))
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

/// What the worker does next.
enum Next {
    Command(Command),
    /// The oldest lingering channel's linger ended.
    LingerEnded,
    /// The registry is gone.
    Closed,
}

/// The next command, or the end of the oldest linger (`lingers_until`) if it comes first.
async fn next_command(
    commands: &mut mpsc::UnboundedReceiver<Command>,
    lingers_until: Option<Instant>,
) -> Next {
    let Some(until) = lingers_until else {
        return commands.recv().await.map_or(Next::Closed, Next::Command);
    };
    tokio::select! {
        biased;
        command = commands.recv() => command.map_or(Next::Closed, Next::Command),
        () = tokio::time::sleep_until(until) => Next::LingerEnded,
    }
}

#[cfg(test)]
mod tests;
