//! [`FaultProxy`]: a TCP proxy between clients and a server that injects the network
//! faults a lock library must survive: a reply lost after the server ran the command,
//! delayed replies, and a black hole.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does to traffic.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ProxyFault {
    /// Forward everything.
    #[default]
    Forward,
    /// Forward the next request that contains these bytes to the server, then reset the
    /// client's connection as soon as the server answers, before the answer reaches the
    /// client: the command ran, its reply is lost. Once it fired, the proxy forwards again.
    LoseReplyTo(Vec<u8>),
    /// As [`ProxyFault::LoseReplyTo`], but once it fired the proxy turns into a
    /// [`ProxyFault::BlackHole`]: the reply is lost and the network stays down.
    LoseReplyThenBlackHole(Vec<u8>),
    /// Hold the next request that contains these bytes back this long, then deliver it
    /// (and what followed it on that connection), even if the client gave up on the
    /// connection meanwhile: a request queued on an abandoned connection, delivered late.
    /// Once it fired, the proxy forwards again.
    HoldRequest(Vec<u8>, Duration),
    /// Forward, holding every reply back this long.
    DelayReplies(Duration),
    /// Accept and keep connections, forward nothing in either direction.
    BlackHole,
}

#[derive(Debug, Default)]
struct State {
    fault: ProxyFault,
    /// How many replies were dropped by [`ProxyFault::LoseReplyTo`].
    lost: usize,
    /// How many requests [`ProxyFault::HoldRequest`] held back.
    held: usize,
}

/// A proxy listening on a free port of 127.0.0.1 that forwards to `upstream`. Dropping it
/// closes the listener and every proxied connection.
pub struct FaultProxy {
    port: u16,
    upstream: Arc<Mutex<SocketAddr>>,
    state: Arc<Mutex<State>>,
    /// Sent on change, so that idle pumps re-read the fault.
    changed: watch::Sender<()>,
    accept: JoinHandle<()>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("port", &self.port)
            .field("upstream", &*lock(&self.upstream))
            .field("fault", &self.fault())
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FaultProxy {
    /// Starts forwarding from a fresh port to `upstream` (such as a test server's
    /// `127.0.0.1:PORT`).
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy's port");
        let port = listener.local_addr().expect("the proxy's address").port();
        let state = Arc::new(Mutex::new(State::default()));
        let (changed, _) = watch::channel(());
        let upstream = Arc::new(Mutex::new(upstream));
        let accept = tokio::spawn(accept_loop(
            listener,
            Arc::clone(&upstream),
            Arc::clone(&state),
            changed.clone(),
        ));
        FaultProxy {
            port,
            upstream,
            state,
            changed,
            accept,
        }
    }

    /// The port clients connect to.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Sends new connections to `upstream` from now on (a failover: the name clients use
    /// now leads to the promoted server); open connections stay where they are.
    pub fn redirect(&self, upstream: SocketAddr) {
        *lock(&self.upstream) = upstream;
    }

    /// What the proxy does from now on (to open connections too).
    pub fn set(&self, fault: ProxyFault) {
        lock(&self.state).fault = fault;
        self.changed.send_replace(());
    }

    /// The fault in force.
    #[must_use]
    pub fn fault(&self) -> ProxyFault {
        lock(&self.state).fault.clone()
    }

    /// How many replies [`ProxyFault::LoseReplyTo`] dropped so far.
    #[must_use]
    pub fn lost_replies(&self) -> usize {
        lock(&self.state).lost
    }

    /// How many requests [`ProxyFault::HoldRequest`] held back so far.
    #[must_use]
    pub fn held_requests(&self) -> usize {
        lock(&self.state).held
    }
}

fn lock<T>(state: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Single assignments only: a poisoned state is still consistent.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn accept_loop(
    listener: TcpListener,
    upstream: Arc<Mutex<SocketAddr>>,
    state: Arc<Mutex<State>>,
    changed: watch::Sender<()>,
) {
    // The connections end with the listener: their tasks are aborted on drop.
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        let to = *lock(&upstream);
        let Ok(server) = TcpStream::connect(to).await else {
            continue;
        };
        connections.spawn(proxy_connection(
            client,
            server,
            Arc::clone(&state),
            changed.subscribe(),
        ));
    }
}

/// One client connection: requests flow client -> server, replies server -> client,
/// each through the faults. A reply to lose resets the client's socket.
async fn proxy_connection(
    client: TcpStream,
    server: TcpStream,
    state: Arc<Mutex<State>>,
    changed: watch::Receiver<()>,
) {
    // Linger 0: closing sends a reset, as a dropped network path would look to a client.
    // A socket that refuses its options is already gone; there is nothing to proxy.
    let configured = client
        .set_zero_linger()
        .and_then(|()| client.set_nodelay(true))
        .and_then(|()| server.set_nodelay(true));
    if configured.is_err() {
        return;
    }
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Set by the request pump when the reply to the next server bytes must be lost.
    let (doomed, doomed_rx) = watch::channel(false);
    tokio::select! {
        () = requests(client_read, server_write, Arc::clone(&state), changed.clone(), doomed) => {}
        () = replies(server_read, client_write, state, changed, doomed_rx) => {}
    }
}

async fn requests(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    state: Arc<Mutex<State>>,
    mut changed: watch::Receiver<()>,
    doomed: watch::Sender<bool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    while let Some(n) = next_chunk(&mut from, &mut buffer, &mut changed).await {
        let chunk = &buffer[..n];
        let fault = lock(&state).fault.clone();
        match fault {
            ProxyFault::BlackHole => continue,
            ProxyFault::LoseReplyTo(pattern) if contains(chunk, &pattern) => {
                lock(&state).fault = ProxyFault::Forward;
                doomed.send_replace(true);
            }
            ProxyFault::LoseReplyThenBlackHole(pattern) if contains(chunk, &pattern) => {
                lock(&state).fault = ProxyFault::BlackHole;
                doomed.send_replace(true);
            }
            ProxyFault::HoldRequest(pattern, delay) if contains(chunk, &pattern) => {
                lock(&state).fault = ProxyFault::Forward;
                lock(&state).held += 1;
                tokio::time::sleep(delay).await;
            }
            _ => {}
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

async fn replies(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    state: Arc<Mutex<State>>,
    mut changed: watch::Receiver<()>,
    doomed: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    while let Some(n) = next_chunk(&mut from, &mut buffer, &mut changed).await {
        if *doomed.borrow() {
            // The command ran; its reply never arrives. Returning drops both halves of
            // the client's socket, which resets it (linger 0).
            lock(&state).lost += 1;
            return;
        }
        let fault = lock(&state).fault.clone();
        match fault {
            ProxyFault::BlackHole => continue,
            ProxyFault::DelayReplies(delay) => tokio::time::sleep(delay).await,
            _ => {}
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

/// Reads the next bytes into `buffer`; `None` once the connection ended. A change of
/// fault wakes the read, so that a lifted black hole forwards what is pending.
async fn next_chunk(
    from: &mut OwnedReadHalf,
    buffer: &mut [u8],
    changed: &mut watch::Receiver<()>,
) -> Option<usize> {
    loop {
        tokio::select! {
            read = from.read(buffer) => return read.ok().filter(|&n| n > 0),
            _ = changed.changed() => {}
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}
