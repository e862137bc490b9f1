//! Requests whose outcome is unknown are sent again.
//!
//! A connection error does not say whether the request ran. Every backend remembers the
//! answer to each request, by its id, for the request's retry window, so the same
//! request can be sent again until it is answered: one that already ran gets its first
//! answer back and changes nothing. A grant whose caller never learnt of it (the caller
//! went away, or stopped waiting) is undone by an undo release, which releases it only
//! if the backend remembers granting it.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Error, ErrorKind};

/// The first pause before a request is sent again; it doubles up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// Whether `result` leaves it unknown whether the request ran.
pub(crate) fn unanswered<T>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(err) if err.kind() == ErrorKind::Connection)
}

/// Sends a request (`send` makes the same one each time) until it is answered or no
/// pause fits before `until`; returns the last outcome.
pub(crate) async fn until_answered<T, F, Fut>(until: Instant, mut send: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let mut pause = FIRST_PAUSE;
    loop {
        let outcome = send().await;
        if !unanswered(&outcome) || Instant::now() + pause >= until {
            return outcome;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}
