//! The latest release of each name whose answer this client got. The name's next
//! release names it ([`ReleaseRequest::answered_before`]), so that a store that keeps
//! release answers in the name's state forgets that one at once rather than after the
//! retry window: a hot name's state then keeps one or two answers, not one per release
//! in the window.
//!
//! [`ReleaseRequest::answered_before`]: crate::backend::ReleaseRequest::answered_before

use std::sync::{Mutex, PoisonError};

use foldhash::HashMap;

use crate::LockName;
use crate::backend::RequestId;

/// How many names are kept at most: past it the map starts again, and the answers of
/// the names dropped are forgotten by their stores after the retry window, as before.
const MOST: usize = 4096;

/// See the [module](self).
#[derive(Debug, Default)]
pub(crate) struct AnsweredReleases(Mutex<HashMap<LockName, RequestId>>);

impl AnsweredReleases {
    /// The latest answered release of `name`, which its next release names.
    pub(crate) fn take(&self, name: &LockName) -> Option<RequestId> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
    }

    /// Release `id` of `name` was answered.
    pub(crate) fn answered(&self, name: &LockName, id: RequestId) {
        let mut latest = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if latest.len() >= MOST && !latest.contains_key(name) {
            latest.clear();
        }
        latest.insert(name.clone(), id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_gives_its_latest_answered_release_once() {
        let answered = AnsweredReleases::default();
        let name = LockName::new("a").expect("name");
        let (first, second) = (RequestId::random(), RequestId::random());
        answered.answered(&name, first);
        answered.answered(&name, second);
        assert_eq!(answered.take(&name), Some(second));
        assert_eq!(answered.take(&name), None);
    }

    #[test]
    fn the_map_stays_within_its_bound() {
        let answered = AnsweredReleases::default();
        for n in 0..(MOST + 10) {
            let name = LockName::new(&format!("n{n}")).expect("name");
            answered.answered(&name, RequestId::random());
        }
        let kept = answered
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        assert!(kept <= MOST, "{kept}");
    }
}
