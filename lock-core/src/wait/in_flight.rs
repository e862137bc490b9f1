//! One request on its way, cancel-safe: it is polled by its caller (no task per
//! request), and if the caller goes away before the answer, or the answer leaves it
//! unknown whether the store ran it (a connection error), what is left of it runs in a
//! job of the client's supervisor, which [settles](Settle) it: gives back what the store
//! granted that nobody will hold.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::oneshot;

use crate::background::supervisor::Supervisor;
use crate::{Error, retry};

/// The store's answer to a request, still to come.
pub(crate) type Call<T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send>>;

/// What becomes of a request its caller will not hear the end of. Cloned only on the
/// rare way to a settling job.
pub(crate) trait Settle<T>: Clone + Send + 'static {
    /// Settles the request: `Some(answer)` when the store answered after its caller went
    /// away, `None` when it is unknown whether the store ran it.
    fn settle(self, answer: Option<T>) -> impl Future<Output = ()> + Send + 'static;

    /// The settling job could not be started (the runtime is shutting down): says so
    /// (what the store granted lasts until its lease ends, if it has one).
    fn unsettled(&self, err: &Error);
}

/// One request on its way: see the [module](self).
pub(crate) struct InFlight<T: Send + 'static, S: Settle<T>> {
    /// `None` once answered.
    call: Option<Call<T>>,
    /// `None` once answered or settled.
    settle: Option<S>,
    supervisor: Arc<Supervisor>,
    /// Dropped once the request is over, settling included, so that what must come
    /// after it (a waiter's cancellation, which could otherwise reach the store first
    /// and be undone by the request) waits for that.
    done: Option<oneshot::Sender<()>>,
}

impl<T: Send + 'static, S: Settle<T>> InFlight<T, S> {
    /// `call` on its way, settled by `settle` when its caller will not hear its end.
    pub(crate) fn new(call: Call<T>, settle: S, supervisor: &Arc<Supervisor>) -> Self {
        Self {
            call: Some(call),
            settle: Some(settle),
            supervisor: Arc::clone(supervisor),
            done: None,
        }
    }

    /// Keeps `done` until the request is over.
    pub(crate) fn keeping(mut self, done: Option<oneshot::Sender<()>>) -> Self {
        self.done = done;
        self
    }

    /// Finishes the request in a job: awaits `call`'s answer, if one is still to come
    /// (with none, the outcome is unknown), and settles it.
    fn settle_in_background(&mut self, call: Option<Call<T>>) {
        let Some(settle) = self.settle.take() else {
            return;
        };
        let done = self.done.take();
        let reporter = settle.clone();
        let job = async move {
            let answer = match call {
                None => Some(None),
                Some(call) => match call.await {
                    Ok(answer) => Some(Some(answer)),
                    Err(err) if retry::is_unanswered(&err) => Some(None),
                    // Refused: nothing was granted.
                    Err(_) => None,
                },
            };
            if let Some(answer) = answer {
                settle.settle(answer).await;
            }
            drop(done);
        };
        if let Err(err) = self.supervisor.spawn_job(job) {
            reporter.unsettled(&err);
        }
    }
}

impl<T: Send + 'static, S: Settle<T>> Unpin for InFlight<T, S> {}

impl<T: Send + 'static, S: Settle<T>> Future for InFlight<T, S> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(call) = this.call.as_mut() else {
            return Poll::Ready(Err(Error::protocol("a request polled after its answer")));
        };
        let reply = std::task::ready!(call.as_mut().poll(cx));
        this.call = None;
        if retry::unanswered(&reply) {
            this.settle_in_background(None);
        } else {
            this.settle = None;
            this.done = None;
        }
        Poll::Ready(reply)
    }
}

impl<T: Send + 'static, S: Settle<T>> Drop for InFlight<T, S> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.settle_in_background(Some(call));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// What a settle was given, if anything.
    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<Option<u32>>>>);

    impl Seen {
        fn settled(&self) -> Vec<Option<u32>> {
            self.0.lock().expect("not poisoned").clone()
        }
    }

    impl Settle<u32> for Seen {
        fn settle(self, answer: Option<u32>) -> impl Future<Output = ()> + Send + 'static {
            self.0.lock().expect("not poisoned").push(answer);
            std::future::ready(())
        }

        fn unsettled(&self, _: &Error) {}
    }

    async fn drained(supervisor: &Supervisor) {
        tokio::time::timeout(Duration::from_secs(2), supervisor.drain())
            .await
            .expect("the settling job ends");
    }

    /// A request whose caller went away before its answer is settled with the answer
    /// that came after: a grant nobody will use is given back, never lost.
    #[tokio::test]
    async fn an_answer_its_caller_left_before_is_settled() {
        let supervisor = Arc::new(Supervisor::new());
        let (answer, answer_comes) = oneshot::channel::<u32>();
        let call: Call<u32> =
            Box::pin(async move { answer_comes.await.map_err(|_| Error::protocol("no answer")) });
        let seen = Seen::default();
        let mut in_flight = Box::pin(InFlight::new(call, seen.clone(), &supervisor));
        let first = std::future::poll_fn(|cx| Poll::Ready(in_flight.as_mut().poll(cx))).await;
        assert!(first.is_pending(), "no answer yet");
        drop(in_flight);
        answer.send(7).expect("the job awaits the answer");
        drained(&supervisor).await;
        assert_eq!(seen.settled(), [Some(7)]);
    }

    /// An answer that leaves it unknown whether the store ran the request is settled as
    /// unknown; an answer its caller read, or a refusal, is not settled at all.
    #[tokio::test]
    async fn an_unknown_outcome_is_settled_and_a_read_answer_is_not() {
        let supervisor = Arc::new(Supervisor::new());
        let seen = Seen::default();
        let lost: Call<u32> =
            Box::pin(async { Err(Error::connection("sending", "the connection reset")) });
        let outcome = InFlight::new(lost, seen.clone(), &supervisor).await;
        assert!(outcome.is_err());
        let read: Call<u32> = Box::pin(async { Ok(8) });
        assert_eq!(
            InFlight::new(read, seen.clone(), &supervisor).await.ok(),
            Some(8)
        );
        let refused: Call<u32> = Box::pin(async { Err(Error::protocol("refused")) });
        assert!(
            InFlight::new(refused, seen.clone(), &supervisor)
                .await
                .is_err()
        );
        drained(&supervisor).await;
        assert_eq!(seen.settled(), [None]);
    }

    /// What must come after the request (a waiter's cancellation) waits until it is
    /// over, settling included.
    #[tokio::test]
    async fn the_ticket_is_kept_until_the_request_is_settled() {
        let supervisor = Arc::new(Supervisor::new());
        let (ticket, over) = oneshot::channel::<()>();
        let (answer, answer_comes) = oneshot::channel::<u32>();
        let call: Call<u32> =
            Box::pin(async move { answer_comes.await.map_err(|_| Error::protocol("no answer")) });
        let mut in_flight =
            Box::pin(InFlight::new(call, Seen::default(), &supervisor).keeping(Some(ticket)));
        let first = std::future::poll_fn(|cx| Poll::Ready(in_flight.as_mut().poll(cx))).await;
        assert!(first.is_pending());
        drop(in_flight);
        let mut over = Box::pin(over);
        let early = std::future::poll_fn(|cx| Poll::Ready(over.as_mut().poll(cx))).await;
        assert!(
            early.is_pending(),
            "the ticket went before the request was over"
        );
        answer.send(1).expect("the job awaits the answer");
        drained(&supervisor).await;
        assert!(over.await.is_err(), "the ticket is dropped, never sent");
    }
}
