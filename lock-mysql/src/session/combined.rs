//! Tries and releases that several callers ask of one session at once, sent as one
//! statement.
//!
//! A carrier session runs one statement at a time, so under load its callers queue. The
//! caller that gets the connection sends every queued try (`GET_LOCK(key, 0)`) and
//! release (`RELEASE_LOCK(key)`) as the columns of one `SELECT` and hands each caller
//! its column. That saves the server a statement's network and parsing work per call,
//! and the client a round trip; a caller alone sends its call alone.
//!
//! Three rules keep it exact:
//!
//! - Two calls on one key never share a statement. The order in which a server
//!   evaluates a `SELECT`'s columns is not a documented promise, and a release and a
//!   try of one key must happen in the order they were asked.
//! - A statement that fails with more than one call in it gives the session up: which
//!   of its calls took effect is not known, and ending the session frees every lock it
//!   held, which lock-core counts as lost holds.
//! - A call whose caller went away is not sent; a try granted after its caller went
//!   away is given back at once.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use lock_core::Error;
use mysql_async::{Params, Value};
use tokio::sync::oneshot;

/// The most calls one statement carries. Each mix of tries and releases is a statement
/// of its own in the driver's cache of prepared statements (32 by default): at most
/// four calls make 14 of them.
const MOST: usize = 4;

/// What a caller asks of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Call {
    /// `GET_LOCK(key, 0)`.
    Try,
    /// `RELEASE_LOCK(key)`.
    Release,
}

impl Call {
    fn column(self) -> &'static str {
        match self {
            Self::Try => "GET_LOCK(?, 0)",
            Self::Release => "RELEASE_LOCK(?)",
        }
    }
}

/// The server's answer to one call: 1, 0 or NULL, as `GET_LOCK` and `RELEASE_LOCK`
/// answer.
pub(super) type Answer = Result<Option<i64>, Error>;

/// A call waiting for a statement.
#[derive(Debug)]
pub(super) struct Queued {
    pub(super) call: Call,
    pub(super) key: String,
    pub(super) during: &'static str,
    answer: oneshot::Sender<Answer>,
}

impl Queued {
    /// Hands the caller its answer. A try granted to a caller that went away comes back
    /// as its key, to be given back.
    pub(super) fn answer(self, answer: Answer) -> Option<String> {
        let granted = self.call == Call::Try && matches!(answer, Ok(Some(1)));
        match self.answer.send(answer) {
            Ok(()) => None,
            Err(_) => granted.then_some(self.key),
        }
    }
}

/// The calls waiting for the session's next statement, in the order they were asked.
#[derive(Debug, Default)]
pub(super) struct Queue {
    calls: Mutex<VecDeque<Queued>>,
}

impl Queue {
    /// Queues a call; its answer comes on the receiver.
    pub(super) fn push(
        &self,
        call: Call,
        key: &str,
        during: &'static str,
    ) -> oneshot::Receiver<Answer> {
        let (answer, answered) = oneshot::channel();
        self.lock().push_back(Queued {
            call,
            key: key.to_owned(),
            during,
            answer,
        });
        answered
    }

    /// The calls of the next statement, from the front of the queue: at most [`MOST`],
    /// ending before a second call on one key, leaving out the calls whose callers
    /// went away.
    pub(super) fn next_statement(&self) -> Vec<Queued> {
        let mut calls = self.lock();
        let mut statement: Vec<Queued> = Vec::with_capacity(MOST.min(calls.len()));
        while statement.len() < MOST {
            let Some(next) = calls.front() else { break };
            if statement.iter().any(|taken| taken.key == next.key) {
                break;
            }
            if let Some(next) = calls.pop_front()
                && !next.answer.is_closed()
            {
                statement.push(next);
            }
        }
        statement
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The statement that sends `calls`, its tries first (their order does not matter:
/// their keys differ), and its parameters; the calls are put in the same order.
pub(super) fn statement(calls: &mut [Queued]) -> (String, Params) {
    calls.sort_by_key(|queued| queued.call == Call::Release);
    let columns: Vec<&str> = calls.iter().map(|queued| queued.call.column()).collect();
    let params = calls
        .iter()
        .map(|queued| Value::from(queued.key.as_str()))
        .collect();
    (
        format!("SELECT {}", columns.join(", ")),
        Params::Positional(params),
    )
}

#[cfg(test)]
mod tests {
    use super::{Call, MOST, Queue, statement};

    fn keys(calls: &[super::Queued]) -> Vec<&str> {
        calls.iter().map(|queued| queued.key.as_str()).collect()
    }

    /// A statement takes at most `MOST` calls, ends before a second call on one key, and
    /// leaves out the calls whose callers went away. Fails if a key could appear twice
    /// in one statement, or a dropped caller's call were sent.
    #[test]
    fn a_statement_takes_distinct_keys_of_callers_still_waiting() {
        let queue = Queue::default();
        let _a = queue.push(Call::Try, "a", "test");
        let gone = queue.push(Call::Try, "b", "test");
        drop(gone);
        let _c = queue.push(Call::Release, "c", "test");
        let _a_again = queue.push(Call::Release, "a", "test");
        let _d = queue.push(Call::Try, "d", "test");
        assert_eq!(keys(&queue.next_statement()), ["a", "c"]);
        assert_eq!(keys(&queue.next_statement()), ["a", "d"]);
        assert!(queue.next_statement().is_empty());

        let waiting: Vec<_> = (0..MOST + 2)
            .map(|n| queue.push(Call::Try, &n.to_string(), "test"))
            .collect();
        assert_eq!(queue.next_statement().len(), MOST);
        assert_eq!(queue.next_statement().len(), 2);
        drop(waiting);
    }

    /// The tries come first, and each key stays beside its call.
    #[test]
    fn the_statement_puts_tries_first() {
        let queue = Queue::default();
        let _r = queue.push(Call::Release, "r", "test");
        let _t = queue.push(Call::Try, "t", "test");
        let mut calls = queue.next_statement();
        let (text, _) = statement(&mut calls);
        assert_eq!(text, "SELECT GET_LOCK(?, 0), RELEASE_LOCK(?)");
        assert_eq!(keys(&calls), ["t", "r"]);
    }

    /// A try granted after its caller went away comes back to be given back; a release,
    /// or a try refused, does not.
    #[test]
    fn a_grant_nobody_waits_for_comes_back() {
        let queue = Queue::default();
        drop(queue.push(Call::Try, "granted", "test"));
        drop(queue.push(Call::Try, "refused", "test"));
        drop(queue.push(Call::Release, "released", "test"));
        let calls: Vec<_> = std::mem::take(&mut *queue.lock()).into_iter().collect();
        let answers = [Ok(Some(1)), Ok(Some(0)), Ok(Some(1))];
        let back: Vec<_> = calls
            .into_iter()
            .zip(answers)
            .filter_map(|(queued, answer)| queued.answer(answer))
            .collect();
        assert_eq!(back, ["granted"]);
    }
}
