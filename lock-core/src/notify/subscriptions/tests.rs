//! The registry's subscriptions, wake-ups and reconnections.

use std::time::Duration;

use async_trait::async_trait;

use super::*;
use tokio::sync::Notify;

use crate::backend::RequestId;
use crate::notify::InProcess;

#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<String>>);

impl Recorder {
    fn record(&self, request: String) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request);
    }
}

#[async_trait]
impl PubSub for Recorder {
    async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        self.record(format!("+{channel}"));
        Ok(())
    }
    async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        self.record(format!("-{channel}"));
        Ok(())
    }
}

fn log(rec: &Recorder) -> Vec<String> {
    rec.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

#[tokio::test]
async fn one_subscription_per_channel_released_by_the_last_listener() {
    let rec = Arc::new(Recorder::default());
    let subs = Subscriptions::new(rec.clone());
    let a = subs.listen("c").await.expect("listen");
    let b = subs.listen("c").await.expect("listen");
    assert_eq!(subs.channels(), vec!["c".to_string()]);
    drop(a);
    assert_eq!(subs.channels(), vec!["c".to_string()]);
    drop(b);
    assert!(subs.channels().is_empty());
    let c = subs.listen("c").await.expect("listen");
    drop(c);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(log(&rec), vec!["+c", "-c", "+c", "-c"]);
}

#[tokio::test]
async fn wake_one_wakes_exactly_one_and_a_permit_is_not_lost() {
    let subs = Subscriptions::new(Arc::new(InProcess));
    let a = subs.listen("c").await.expect("listen");
    let b = subs.listen("c").await.expect("listen");
    let na = a.notified();
    let nb = b.notified();
    tokio::pin!(na, nb);
    na.as_mut().enable();
    nb.as_mut().enable();
    subs.deliver("c", Wake::One);
    let woke = tokio::select! {
        () = &mut na => "a",
        () = &mut nb => "b",
    };
    assert!(woke == "a" || woke == "b");
    let other = tokio::time::timeout(Duration::from_millis(30), async {
        if woke == "a" { nb.await } else { na.await }
    })
    .await;
    assert!(other.is_err(), "a single release must wake a single waiter");
}

#[tokio::test]
async fn reconnect_resubscribes_and_wakes_everyone() {
    let rec = Arc::new(Recorder::default());
    let subs = Subscriptions::new(rec.clone());
    let a = subs.listen("x").await.expect("listen");
    let b = subs.listen("y").await.expect("listen");
    let (na, nb) = (a.notified(), b.notified());
    tokio::pin!(na, nb);
    na.as_mut().enable();
    nb.as_mut().enable();
    subs.reconnected();
    tokio::time::timeout(Duration::from_secs(1), async { tokio::join!(na, nb) })
        .await
        .expect("both woken");
    let mut seen = log(&rec);
    seen.sort();
    assert_eq!(seen, vec!["+x", "+x", "+y", "+y"]);
}

/// Fails its first `lost` subscribe requests as a dropped connection would, and
/// refuses every one with `refused`.
#[derive(Debug)]
struct Unsteady {
    lost: std::sync::atomic::AtomicUsize,
    refused: bool,
    asked: std::sync::atomic::AtomicUsize,
}

impl Unsteady {
    fn new(lost: usize, refused: bool) -> Self {
        Self {
            lost: lost.into(),
            refused,
            asked: 0.into(),
        }
    }

    fn asked(&self) -> usize {
        self.asked.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[async_trait]
impl PubSub for Unsteady {
    async fn subscribe(&self, _channel: &str) -> Result<(), Error> {
        use std::sync::atomic::Ordering::SeqCst;
        self.asked.fetch_add(1, SeqCst);
        if self.refused {
            return Err(Error::backend("subscribing", "NOPERM"));
        }
        let lost = self.lost.load(SeqCst);
        if lost > 0 {
            self.lost.store(lost - 1, SeqCst);
            return Err(Error::connection("subscribing", "connection reset"));
        }
        Ok(())
    }
    async fn unsubscribe(&self, _channel: &str) -> Result<(), Error> {
        Ok(())
    }
}

// Would fail if a subscription lost with its connection failed its listener: the
// fred adapter's sentinel suite saw a waiter fail that way when its connection was
// killed between `SUBSCRIBE` and its confirmation.
#[tokio::test(start_paused = true)]
async fn a_subscription_lost_with_its_connection_is_sent_again() {
    let pubsub = Arc::new(Unsteady::new(3, false));
    let subs = Subscriptions::new(pubsub.clone());
    let listener = subs.listen("c").await;
    assert!(listener.is_ok(), "{listener:?}");
    assert_eq!(pubsub.asked(), 4);
}

#[tokio::test(start_paused = true)]
async fn a_refused_subscription_fails_at_once_and_an_outage_within_the_window() {
    let refused = Arc::new(Unsteady::new(0, true));
    let err = Subscriptions::new(refused.clone()).listen("c").await;
    assert!(err.is_err_and(|err| err.is_backend()));
    assert_eq!(refused.asked(), 1);
    let outage = Arc::new(Unsteady::new(usize::MAX, false));
    let began = tokio::time::Instant::now();
    let err = Subscriptions::new(outage.clone()).listen("c").await;
    assert!(err.is_err_and(|err| err.kind() == crate::ErrorKind::Connection));
    assert!(
        began.elapsed() <= DEFAULT_RETRY_WINDOW,
        "{:?}",
        began.elapsed()
    );
    assert!(outage.asked() > 1);
}

// Would fail if the last listener's going unsubscribed at once (the log would show
// "-c", "+c" between the two waits), or if a lingering channel were never unsubscribed.
#[tokio::test(start_paused = true)]
async fn a_lingering_channel_is_listened_to_again_without_a_request_until_its_linger_ends() {
    let rec = Arc::new(Recorder::default());
    let linger = Duration::from_millis(500);
    let subs = Subscriptions::lingering(rec.clone(), linger);
    assert!(subs.listening("c").is_none(), "nothing subscribed yet");
    assert!(subs.is_empty());
    drop(subs.listen("c").await.expect("listen"));
    tokio::time::sleep(linger / 2).await;
    assert_eq!(subs.channels(), ["c"], "it lingers");
    assert_eq!(subs.listeners("c"), 0, "with nobody listening");
    assert!(!subs.is_empty(), "a lingering channel is subscribed");
    let again = subs.listening("c").expect("at hand while it lingers");
    tokio::time::sleep(linger * 2).await;
    assert_eq!(log(&rec), ["+c"], "listened to again: no request, no end");
    drop(again);
    tokio::time::sleep(linger / 2).await;
    assert_eq!(
        log(&rec),
        ["+c"],
        "a second linger, counted from the second leave"
    );
    tokio::time::sleep(linger).await;
    assert_eq!(
        log(&rec),
        ["+c", "-c"],
        "unsubscribed once its linger ended"
    );
    assert!(subs.channels().is_empty());
    assert!(subs.is_empty());
    assert!(subs.listening("c").is_none(), "no longer at hand");
    let fresh = subs.listen("c").await.expect("listen");
    assert_eq!(log(&rec), ["+c", "-c", "+c"]);
    drop(fresh);
}

/// Holds every subscription unconfirmed until told.
#[derive(Debug, Default)]
struct Unconfirmed(Notify);

#[async_trait]
impl PubSub for Unconfirmed {
    async fn subscribe(&self, _channel: &str) -> Result<(), Error> {
        self.0.notified().await;
        Ok(())
    }
    async fn unsubscribe(&self, _channel: &str) -> Result<(), Error> {
        Ok(())
    }
}

// Would fail if a subscription the server has not confirmed were handed out at once: a
// waiter listening on it could miss a release sent before the confirmation.
#[tokio::test(start_paused = true)]
async fn a_subscription_not_confirmed_yet_is_not_at_hand() {
    let pubsub = Arc::new(Unconfirmed::default());
    let subs = Subscriptions::lingering(pubsub.clone(), Duration::from_secs(1));
    let listening = tokio::spawn({
        let subs = subs.clone();
        async move { subs.listen("c").await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        subs.listeners("c"),
        1,
        "the first listener waits for its confirmation"
    );
    assert!(subs.listening("c").is_none(), "unconfirmed: not at hand");
    pubsub.0.notify_one();
    let first = listening.await.expect("task").expect("confirmed");
    assert!(subs.listening("c").is_some(), "confirmed: at hand");
    drop(first);
}

// Would fail if a hand-over woke the listener that has waited longest (as `Wake::One`
// does) rather than the acquisition it names: the clients of one in-process store share
// one registry, and the longest asleep is often another client's waiter.
#[tokio::test]
async fn a_hand_over_wakes_the_waiter_it_names_alone() {
    let subs = Subscriptions::new(Arc::new(InProcess));
    let longest = subs.listen("c").await.expect("listen");
    let mut named = subs.listen("c").await.expect("listen");
    let (other, acquisition) = (RequestId::random(), RequestId::random());
    let mut unnamed = subs.listen("c").await.expect("listen");
    unnamed.expect_hand_over(other);
    named.expect_hand_over(acquisition);
    let asleep = longest.notified();
    tokio::pin!(asleep);
    asleep.as_mut().enable();
    subs.deliver_handed("c", Handed::new(acquisition, 1, None), Wake::One);
    tokio::time::timeout(Duration::from_millis(500), named.handed_here())
        .await
        .expect("the waiter the hand-over names is woken");
    assert_eq!(
        named.take_handed(acquisition),
        Some(Handed::new(acquisition, 1, None))
    );
    let woken_besides = tokio::time::timeout(Duration::from_millis(30), async {
        tokio::select! {
            () = &mut asleep => "the longest asleep",
            () = unnamed.handed_here() => "another acquisition",
        }
    })
    .await;
    assert!(woken_besides.is_err(), "{woken_besides:?} was woken too");

    // A hand-over to an acquisition nobody expects wakes one listener, as before: its
    // waiter may be about to listen, and finds its hold when it asks.
    drop(named);
    subs.deliver_handed("c", Handed::new(acquisition, 2, None), Wake::One);
    tokio::time::timeout(Duration::from_millis(500), &mut asleep)
        .await
        .expect("one listener is woken");
}
