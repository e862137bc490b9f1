//! The subscriber client's reader: release notifications into lock-core, and a
//! resubscription whenever the connection was re-established or messages were dropped.

use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::{ClientLike, EventInterface, HeartbeatInterface, Value};
use lock_redis_protocol::NotificationSink;
use tokio::sync::broadcast::error::RecvError;

use crate::transport::{Commands, quit_failed};

/// What the reader closes when it stops.
#[derive(Clone)]
pub(crate) struct Owned {
    pub(crate) subscriber: SubscriberClient,
    /// The command clients, when this adapter opened them (not the application's).
    pub(crate) commands: Option<Commands>,
}

/// Reads notifications into `sink` until the backend is gone, then closes what this
/// adapter opened.
pub(crate) async fn pump(owned: Owned, sink: NotificationSink, ping_interval: Duration) {
    let subscriber = &owned.subscriber;
    let mut messages = subscriber.message_rx();
    let mut reconnects = subscriber.reconnect_rx();
    // A subscribed connection is otherwise silent: pings make a dead one noticed (the
    // unresponsive check closes it) and replaced.
    let heartbeat = subscriber.enable_heartbeat(ping_interval, false);
    tokio::pin!(heartbeat);
    let mut heartbeat_ended = false;
    loop {
        tokio::select! {
            biased;
            () = sink.closed() => break,
            message = messages.recv() => match message {
                Ok(message) => sink.message(&message.channel, &payload(&message.value)),
                // Dropped messages are handled like a reconnect: every waiter re-checks.
                Err(RecvError::Lagged(_)) => sink.messages_dropped(),
                Err(RecvError::Closed) => break,
            },
            reconnect = reconnects.recv() => match reconnect {
                Ok(_) | Err(RecvError::Lagged(_)) => sink.reconnected(),
                Err(RecvError::Closed) => break,
            },
            _ = &mut heartbeat, if !heartbeat_ended => heartbeat_ended = true,
        }
        if sink.is_closed() {
            break;
        }
    }
    let quit = async {
        if let Err(err) = subscriber.quit().await {
            quit_failed("the subscriber connection", &err);
        }
        if let Some(commands) = &owned.commands {
            commands.quit().await;
        }
    };
    if let Err(elapsed) = tokio::time::timeout(Duration::from_secs(1), quit).await {
        quit_failed("the connections", &elapsed);
    }
}

fn payload(value: &Value) -> Vec<u8> {
    match value {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Bytes(b) => b.to_vec(),
        Value::Integer(n) => n.to_string().into_bytes(),
        _ => Vec::new(),
    }
}
