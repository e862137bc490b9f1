//! The majority arithmetic of RedLock: every verdict a pure function of the nodes'
//! answers, apart from the I/O that gathers them.

use std::time::Duration;

use lock_core::backend::{Acquire, LockState, Release, Renewal};
use lock_core::{Error, ErrorKind, RequestId};

use super::NodeRelease;
use crate::error::{NodeErrors, timed_out};

/// One node's answer to an acquire.
pub(super) enum Granted {
    Yes {
        holds: u32,
        token: Option<u64>,
        origin: Option<RequestId>,
    },
    Busy(Option<Duration>),
    Failed(Error),
}

impl Granted {
    /// A node's outcome as the verdicts read it.
    pub(super) fn of(outcome: Result<Acquire, Error>) -> Self {
        match outcome {
            Ok(Acquire::Acquired {
                holds,
                token,
                origin,
            }) => Self::Yes {
                holds,
                token,
                origin,
            },
            Ok(Acquire::Busy { ttl, .. }) => Self::Busy(ttl),
            // A late copy of an attempt this node already ended: nothing was taken.
            Ok(Acquire::Ended) => Self::Busy(None),
            Ok(_) => Self::Failed(Error::protocol("a node answered an unknown reply")),
            Err(err) => Self::Failed(err),
        }
    }
}

/// What a renewal of one lock on every node comes to.
#[derive(Debug)]
pub(super) enum RenewalVerdict {
    /// A majority renewed it; the nodes listed had lost it and get it back. `origin`:
    /// the grant that began the hold on a majority of the nodes, when one did.
    Renewed {
        repair: Vec<usize>,
        origin: Option<RequestId>,
    },
    /// A majority no longer has it.
    Gone,
    /// Too many nodes failed to tell.
    Failed(Error),
}

/// N nodes and their majority, N/2 + 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Quorum {
    nodes: usize,
    majority: usize,
}

impl Quorum {
    pub(super) fn of(nodes: usize) -> Self {
        Self {
            nodes,
            majority: nodes / 2 + 1,
        }
    }

    pub(super) fn majority(self) -> usize {
        self.majority
    }

    /// How many nodes may refuse or fail while a majority can still agree.
    fn spare(self) -> usize {
        self.nodes - self.majority
    }

    /// Whether an acquire is decided before the other nodes answer: a majority granted
    /// it, or refused it because others hold the lock. A majority made impossible by
    /// failures is not decided early: whether the answer is an error or busy depends on
    /// how many failed, and a node that refused first must not pass for the majority's
    /// answer while the others are unreachable.
    pub(super) fn acquire_decided(self, granted: usize, busy: usize) -> bool {
        granted >= self.majority || busy > self.spare()
    }

    /// The answer to an acquire that did not get a majority: the caller's own error if
    /// a majority refused it for a reason no retry changes (the caller holds the read
    /// lock, or the key has another type), every node's error if too many failed, else
    /// busy until the shortest lease among the holders' nodes.
    pub(super) fn not_acquired(self, answers: Vec<Option<Granted>>) -> Result<Acquire, Error> {
        let mut failures = Vec::new();
        let mut ttl: Option<Duration> = None;
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Some(Granted::Failed(err)) => failures.push((i, err)),
                Some(Granted::Busy(Some(t))) => ttl = Some(ttl.map_or(t, |m| m.min(t))),
                _ => {}
            }
        }
        let final_answer = |err: &Error| {
            matches!(
                err.kind(),
                ErrorKind::WouldDeadlock | ErrorKind::Incompatible
            )
        };
        let refused = failures.iter().filter(|(_, err)| final_answer(err)).count();
        if refused >= self.majority
            && let Some(index) = failures.iter().position(|(_, err)| final_answer(err))
        {
            return Err(failures.swap_remove(index).1);
        }
        if failures.len() > self.spare() {
            return Err(self.nodes_failed("acquiring on a majority of nodes", failures));
        }
        Ok(Acquire::Busy {
            ttl,
            reserved: false,
        })
    }

    /// A release's outcome once a majority of nodes agree on it: released, or still
    /// held (with the count that majority agrees on). `None` while they do not (yet).
    pub(super) fn release_agreed(self, report: &[Option<NodeRelease>]) -> Option<Release> {
        let mut released = 0;
        let mut still = Vec::new();
        for node in report.iter().flatten() {
            match node {
                NodeRelease::Done(Release::Released) => released += 1,
                NodeRelease::Done(Release::StillHeld { holds }) => still.push(*holds),
                _ => {}
            }
        }
        if released >= self.majority {
            return Some(Release::Released);
        }
        if still.len() >= self.majority {
            still.sort_unstable_by(|a, b| b.cmp(a));
            return Some(Release::StillHeld {
                holds: still[self.majority - 1],
            });
        }
        None
    }

    /// A release's outcome from every node's answer, when no majority agreed on
    /// "released" or on "still held".
    ///
    /// A hold that a majority still had (some nodes released it, some kept a count) is
    /// released: a minority keeps no lock. A hold a majority no longer had was lost
    /// before the release (leases ran out, nodes restarted, someone force-unlocked it),
    /// even where a minority still had its part: not held, as on one node. When failed
    /// nodes could tip it either way, nobody knows, and the failures are the answer.
    pub(super) fn release_settled(self, report: &[NodeRelease]) -> Result<Release, Error> {
        let (mut held, mut failed) = (0, Vec::new());
        for (i, node) in report.iter().enumerate() {
            match node {
                NodeRelease::Done(Release::Released | Release::StillHeld { .. }) => held += 1,
                NodeRelease::Done(_) => {}
                NodeRelease::Failed(err) => failed.push((i, err.clone())),
            }
        }
        if held >= self.majority {
            return Ok(Release::Released);
        }
        if held + failed.len() >= self.majority {
            return Err(self.nodes_failed("releasing on a majority of nodes", failed));
        }
        Ok(Release::NotHeld)
    }

    /// What renewing the `k`-th lock of a batch came to, from each node's answer to the
    /// batch (`None`: no answer within `timeout`).
    pub(super) fn renewal(
        self,
        k: usize,
        per_node: &[Option<Result<Vec<Renewal>, Error>>],
        timeout: Duration,
    ) -> RenewalVerdict {
        let (mut renewed, mut gone, mut failed) = (0, Vec::new(), Vec::new());
        let mut origins = Vec::new();
        for (i, outcome) in per_node.iter().enumerate() {
            match outcome
                .as_ref()
                .map(|answer| answer.as_ref().map(|all| all.get(k)))
            {
                Some(Ok(Some(Renewal::Renewed { origin }))) => {
                    renewed += 1;
                    origins.push(*origin);
                }
                Some(Ok(Some(Renewal::Failed(err))) | Err(err)) => failed.push((i, err.clone())),
                Some(Ok(_)) => gone.push(i),
                None => failed.push((i, timed_out(timeout))),
            }
        }
        if renewed >= self.majority {
            RenewalVerdict::Renewed {
                repair: gone,
                origin: crate::origin::majority_origin(origins.into_iter(), self.majority),
            }
        } else if gone.len() > self.spare() {
            RenewalVerdict::Gone
        } else {
            RenewalVerdict::Failed(self.nodes_failed("renewing on a majority of nodes", failed))
        }
    }

    /// What a majority's inspections say: locked when a majority holds it, with the hold
    /// count a majority agrees on (the majority-th largest) and the shortest lease left
    /// among the holding nodes; every node's error when too many failed to tell.
    pub(super) fn inspected(
        self,
        answers: Vec<(usize, Result<LockState, Error>)>,
    ) -> Result<LockState, Error> {
        let (mut locked, mut holds, mut ttl, mut failed) = (0, Vec::new(), None, Vec::new());
        for (i, outcome) in answers {
            match outcome {
                Ok(state) => {
                    if state.locked {
                        locked += 1;
                        ttl = match (ttl, state.ttl) {
                            (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                            (a, b) => a.or(b),
                        };
                    }
                    holds.push(state.holds);
                }
                Err(err) => failed.push((i, err)),
            }
        }
        if failed.len() > self.spare() {
            return Err(self.nodes_failed("inspecting a majority of nodes", failed));
        }
        holds.sort_unstable_by(|a, b| b.cmp(a));
        let majority_holds = holds.get(self.majority - 1).copied().unwrap_or(0);
        let is_locked = locked >= self.majority;
        Ok(LockState::new(
            is_locked,
            majority_holds,
            ttl.filter(|_| is_locked),
        ))
    }

    /// The answers of the nodes that answered, when enough did for a majority to tell;
    /// else every failed node's error.
    pub(super) fn answered<T>(
        self,
        during: &'static str,
        answers: Vec<(usize, Result<T, Error>)>,
    ) -> Result<Vec<T>, Error> {
        let (mut told, mut failed) = (Vec::new(), Vec::new());
        for (i, outcome) in answers {
            match outcome {
                Ok(answer) => told.push(answer),
                Err(err) => failed.push((i, err)),
            }
        }
        if failed.len() > self.spare() {
            return Err(self.nodes_failed(during, failed));
        }
        Ok(told)
    }

    /// A connection error naming every failed node's error.
    pub(super) fn nodes_failed(self, during: &'static str, failed: Vec<(usize, Error)>) -> Error {
        Error::connection(
            during,
            NodeErrors {
                nodes: failed,
                of: self.nodes,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIVE: Quorum = Quorum {
        nodes: 5,
        majority: 3,
    };
    const TIMEOUT: Duration = Duration::from_millis(50);

    fn failure() -> Error {
        Error::connection("testing", std::io::Error::other("node down"))
    }

    fn busy(ms: u64) -> Granted {
        Granted::Busy(Some(Duration::from_millis(ms)))
    }

    fn yes() -> Granted {
        Granted::Yes {
            holds: 1,
            token: None,
            origin: None,
        }
    }

    #[test]
    fn the_majority_of_n_nodes_is_more_than_half() {
        let majorities: Vec<usize> = (1..=6).map(|n| Quorum::of(n).majority()).collect();
        assert_eq!(majorities, [1, 2, 2, 3, 3, 4]);
    }

    #[test]
    fn an_acquire_is_decided_by_a_granting_or_a_refusing_majority_only() {
        assert!(FIVE.acquire_decided(3, 0), "three of five granted");
        assert!(
            FIVE.acquire_decided(0, 3),
            "three of five busy: no majority is left"
        );
        assert!(!FIVE.acquire_decided(2, 2), "the fifth node decides");
        assert!(
            !FIVE.acquire_decided(2, 0),
            "failures alone decide nothing early"
        );
    }

    #[test]
    fn an_acquire_without_a_majority_is_busy_an_error_or_the_callers_own_error() {
        let answers = vec![
            Some(yes()),
            Some(busy(300)),
            Some(busy(200)),
            Some(Granted::Failed(failure())),
            None,
        ];
        let busy_until = FIVE.not_acquired(answers).expect("busy");
        assert_eq!(
            busy_until,
            Acquire::Busy {
                ttl: Some(Duration::from_millis(200)),
                reserved: false
            },
            "busy until the shortest lease among the holders' nodes"
        );
        let down = (0..3).map(|_| Some(Granted::Failed(failure())));
        let answers: Vec<_> = down.chain([Some(yes()), Some(busy(5))]).collect();
        let err = FIVE.not_acquired(answers).expect_err("three failed");
        assert_eq!(err.kind(), ErrorKind::Connection);
        let deadlock = || Some(Granted::Failed(Error::would_deadlock("n")));
        let answers = vec![deadlock(), deadlock(), deadlock(), Some(busy(1)), None];
        let err = FIVE.not_acquired(answers).expect_err("refused");
        assert_eq!(
            err.kind(),
            ErrorKind::WouldDeadlock,
            "the caller's own error"
        );
    }

    #[test]
    fn a_release_answers_once_a_majority_agrees() {
        let done = |release| Some(NodeRelease::Done(release));
        let released = done(Release::Released);
        let mut report = vec![released.clone(), released.clone(), None, None, None];
        assert_eq!(FIVE.release_agreed(&report), None, "two of five");
        report[4] = released;
        assert_eq!(FIVE.release_agreed(&report), Some(Release::Released));
        let still = |holds| done(Release::StillHeld { holds });
        let report = vec![still(3), still(2), still(2), still(1), None];
        assert_eq!(
            FIVE.release_agreed(&report),
            Some(Release::StillHeld { holds: 2 }),
            "the count a majority agrees on: the third largest"
        );
    }

    #[test]
    fn a_release_without_agreement_is_settled_by_who_still_held() {
        use NodeRelease::{Done, Failed};
        let report = [
            Done(Release::Released),
            Done(Release::StillHeld { holds: 1 }),
            Done(Release::Released),
            Done(Release::NotHeld),
            Done(Release::NotHeld),
        ];
        assert_eq!(
            FIVE.release_settled(&report).expect("settled"),
            Release::Released,
            "a majority held it"
        );
        let report = [
            Done(Release::Released),
            Done(Release::NotHeld),
            Done(Release::NotHeld),
            Done(Release::NotHeld),
            Failed(failure()),
        ];
        assert_eq!(
            FIVE.release_settled(&report).expect("settled"),
            Release::NotHeld,
            "lost before the release: a minority had it"
        );
        let report = [
            Done(Release::Released),
            Done(Release::Released),
            Done(Release::NotHeld),
            Failed(failure()),
            Failed(failure()),
        ];
        let err = FIVE
            .release_settled(&report)
            .expect_err("the failures could tip it");
        assert_eq!(err.kind(), ErrorKind::Connection);
    }

    #[test]
    fn a_renewal_counts_on_a_majority_and_repairs_the_nodes_that_lost_it() {
        let answer = |renewal: Renewal| Some(Ok(vec![Renewal::Renewed { origin: None }, renewal]));
        let per_node = vec![
            answer(Renewal::Renewed { origin: None }),
            answer(Renewal::Renewed { origin: None }),
            answer(Renewal::Gone),
            answer(Renewal::Renewed { origin: None }),
            None,
        ];
        match FIVE.renewal(1, &per_node, TIMEOUT) {
            RenewalVerdict::Renewed { repair, .. } => assert_eq!(repair, [2]),
            other => panic!("renewed on three of five, got {other:?}"),
        }
        let per_node = vec![
            answer(Renewal::Gone),
            answer(Renewal::Gone),
            answer(Renewal::Gone),
            answer(Renewal::Renewed { origin: None }),
            Some(Err(failure())),
        ];
        assert!(matches!(
            FIVE.renewal(1, &per_node, TIMEOUT),
            RenewalVerdict::Gone
        ));
        let per_node = vec![
            answer(Renewal::Renewed { origin: None }),
            answer(Renewal::Renewed { origin: None }),
            answer(Renewal::Gone),
            answer(Renewal::Gone),
            None,
        ];
        match FIVE.renewal(1, &per_node, TIMEOUT) {
            RenewalVerdict::Failed(err) => assert_eq!(err.kind(), ErrorKind::Connection),
            other => panic!("the silent node could tip it, got {other:?}"),
        }
    }

    #[test]
    fn an_inspection_reports_what_a_majority_says() {
        let state = |locked, holds, ms| {
            Ok(LockState::new(
                locked,
                holds,
                Some(Duration::from_millis(ms)),
            ))
        };
        let answers = vec![
            (0, state(true, 2, 900)),
            (1, state(true, 1, 700)),
            (2, state(true, 2, 800)),
            (3, state(false, 0, 0)),
            (4, Err(failure())),
        ];
        let seen = FIVE.inspected(answers).expect("a majority answered");
        assert_eq!(
            seen,
            LockState::new(true, 1, Some(Duration::from_millis(700)))
        );
        let answers = vec![
            (0, state(true, 1, 900)),
            (1, state(true, 1, 900)),
            (2, Err(failure())),
            (3, Err(failure())),
            (4, Err(failure())),
        ];
        let err = FIVE.inspected(answers).expect_err("three failed");
        assert_eq!(err.kind(), ErrorKind::Connection);
    }
}
