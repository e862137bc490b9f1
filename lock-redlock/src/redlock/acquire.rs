//! Acquiring on a majority: one task per node, a decision that tells each task whether
//! its grant counts, and the fencing counters raised to the token the majority gave.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lock_core::backend::Acquire;
use lock_core::runtime::BackgroundJobs;
use lock_core::{AcquireRequest, Backend, Error, LockRef, ReleaseRequest};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use super::RedLock;
use super::gates::{NodeGates, exclusive, share};
use super::quorum::Granted;
use crate::error::timed_out;
use crate::origin::majority_origin;

/// Whether the grants of one acquire attempt count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Pending,
    Kept,
    Undone,
}

/// Acquires on node `index` in a task of its own, so that the call completes even after
/// the request stopped waiting for it. A grant that turns out not to count (the quorum
/// failed, or the caller went away) is released by the task once the request has decided.
/// A request that failed without an answer is undone as an undo of *its* grant, which
/// the node performs only if it granted that request: undoing a reentry that never ran
/// must not take the outer hold away.
fn spawn_acquire(
    (index, node): (usize, Arc<dyn Backend>),
    lock: LockRef,
    request: AcquireRequest,
    mut decision: watch::Receiver<Decision>,
    (gates, background): (Arc<NodeGates>, &BackgroundJobs),
) -> oneshot::Receiver<Result<Acquire, Error>> {
    let (reply, answer) = oneshot::channel();
    // Entered before the task starts: a release of this lock on this node, however soon
    // it comes, waits for this acquisition, and a resend of the request to this node for
    // its end.
    let node_key = (index, lock.clone());
    let force_key = (index, lock.name.clone());
    let gate = gates.in_flight.gate(node_key.clone());
    let try_key = (index, request.id);
    let this_try = gates.tries.gate(try_key);
    let forced = gates.forcing.gate(force_key.clone());
    let (entered, in_try, after_force) = (share(&gate), exclusive(&this_try), share(&forced));
    let call = async move {
        // Not free at once only if a release of an earlier hold, a force release of the
        // name, or the request's earlier try runs on this node: this one goes after it.
        let (in_try, entered) = (in_try.await, entered.await);
        // Held until the node answers: a force release sent after this acquisition
        // goes after it too.
        let after_force = after_force.await;
        let result = node.acquire(&lock, request).await;
        drop(after_force);
        gates.forcing.done(&force_key, forced);
        let maybe_held = !matches!(result, Ok(Acquire::Busy { .. } | Acquire::Ended));
        // A caller that went away no longer needs the answer; `decision` still tells
        // this task whether to give a grant back.
        let _ = reply.send(result);
        if maybe_held {
            let kept = decision
                .wait_for(|d| *d != Decision::Pending)
                .await
                .is_ok_and(|d| *d == Decision::Kept);
            let undo =
                ReleaseRequest::new(request.lease, request.id).retry_window(request.retry_window);
            if !kept && let Err(err) = node.release(&lock, undo).await {
                tracing::warn!(
                    target: lock_core::TRACING_TARGET,
                    node = index,
                    name = %lock.name,
                    error = %err.chain(),
                    "a RedLock node's grant that did not count could not be released; \
                     it holds until its lease ends"
                );
            }
        }
        drop(entered);
        gates.in_flight.done(&node_key, gate);
        drop(in_try);
        gates.tries.done(&try_key, this_try);
    };
    // Not started (no runtime): the reply is dropped with the call, and the caller
    // counts the node as failed.
    if let Err(err) = background.spawn(call) {
        super::fan_out::not_started("an acquire on a node", &err);
    }
    answer
}

impl RedLock {
    /// Asks every node at once and answers as soon as the outcome is decided (see
    /// [`Quorum::acquire_decided`](super::quorum::Quorum::acquire_decided)); late
    /// answers are handled by the nodes' tasks.
    pub(super) async fn acquire_on_majority(
        &self,
        lock: &LockRef,
        request: AcquireRequest,
    ) -> Result<Acquire, Error> {
        let started = Instant::now();
        let timeout = self.node_timeout(request.lease);
        let (decide, decision) = watch::channel(Decision::Pending);
        // Each node would wake a different client alone; every waiting client hears each.
        let request = request.for_a_part();
        let mut calls: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let answer = spawn_acquire(
                    (i, Arc::clone(node)),
                    lock.clone(),
                    request,
                    decision.clone(),
                    (Arc::clone(&self.gates), &self.background),
                );
                async move {
                    let outcome = match tokio::time::timeout(timeout, answer).await {
                        Ok(Ok(result)) => result,
                        Ok(Err(_)) => Err(Error::protocol("a node's task ended without a reply")),
                        Err(_) => Err(timed_out(timeout)),
                    };
                    (i, outcome)
                }
            })
            .collect();
        let mut answers: Vec<Option<Granted>> = (0..self.nodes.len()).map(|_| None).collect();
        let (mut granted, mut busy) = (0, 0);
        while let Some((i, outcome)) = calls.next().await {
            let answer = Granted::of(outcome);
            granted += usize::from(matches!(answer, Granted::Yes { .. }));
            busy += usize::from(matches!(answer, Granted::Busy(_)));
            answers[i] = Some(answer);
            if self.quorum.acquire_decided(granted, busy) {
                break;
            }
        }
        let valid = request
            .lease
            .checked_sub(started.elapsed() + self.drift(request.lease))
            .is_some_and(|v| !v.is_zero());
        let majority = granted >= self.quorum.majority() && valid;
        let (holds, token, origin) = granted_together(&answers, self.quorum.majority());
        // Nodes count tokens separately. The token is the largest the majority gave;
        // raising a majority's counters to it makes every later majority (which shares
        // a node with this one) give a larger one.
        let fenced = match token {
            Some(token) if majority => self.raise_fencing_on_majority(lock, token, timeout).await,
            _ => true,
        };
        // The nodes' tasks that still run read the decision; once all have ended nobody
        // is left to tell, which is no failure.
        if majority && fenced {
            let _ = decide.send(Decision::Kept);
            self.grants()
                .entry(lock.clone())
                .or_default()
                .push(request.id);
            return Ok(Acquire::Acquired {
                holds,
                token,
                origin,
            });
        }
        let _ = decide.send(Decision::Undone);
        self.quorum.not_acquired(answers)
    }

    /// Gives node `index`, which lost `lock`, this client's grants of it back, each under
    /// its own id and through the node's gate (a release of the lock on that node waits
    /// for them, so none lands after it). A grant the node still remembers is answered
    /// as before and counts once.
    pub(super) fn repair(&self, index: usize, lock: &LockRef, lease: Duration) {
        let grants = self.grants().get(lock).cloned().unwrap_or_default();
        for grant in grants {
            let mut request = AcquireRequest::new(lease);
            request.id = grant;
            // Decided at once: the grant counts.
            let (_decided, decision) = watch::channel(Decision::Kept);
            let answer = spawn_acquire(
                (index, Arc::clone(&self.nodes[index])),
                lock.clone(),
                request,
                decision,
                (Arc::clone(&self.gates), &self.background),
            );
            let name = lock.name.clone();
            let reported = self.background.spawn(async move {
                let repaired = match answer.await {
                    Ok(result) => result,
                    Err(_) => Err(Error::protocol("a node's task ended without a reply")),
                };
                if let Err(err) = repaired {
                    tracing::warn!(
                        target: lock_core::TRACING_TARGET,
                        node = index,
                        name = %name,
                        error = %err.chain(),
                        "a RedLock node that lost the lock could not be given it back"
                    );
                }
            });
            if let Err(err) = reported {
                super::fan_out::not_started("giving a lost lock back to a node", &err);
            }
        }
    }

    /// Raises the fencing counter on every node; true when a majority did.
    pub(super) async fn raise_fencing_on_majority(
        &self,
        lock: &LockRef,
        token: u64,
        timeout: Duration,
    ) -> bool {
        let mut calls = self.on_all(timeout, |node| {
            let lock = lock.clone();
            async move { node.raise_fencing(&lock, token).await }
        });
        let mut raised = 0;
        while let Some((_, outcome)) = calls.next().await {
            raised += usize::from(outcome.is_ok());
        }
        raised >= self.quorum.majority()
    }
}

/// What the granting nodes agree on: the largest hold count and token among them, and
/// the grant's origin when a majority of `majority` names the same one.
fn granted_together(
    answers: &[Option<Granted>],
    majority: usize,
) -> (u32, Option<u64>, Option<lock_core::RequestId>) {
    let yes = || {
        answers.iter().flatten().filter_map(|a| match a {
            Granted::Yes {
                holds,
                token,
                origin,
            } => Some((*holds, *token, *origin)),
            _ => None,
        })
    };
    let (holds, token) = yes().fold((0, None), |(h, t), (holds, token, _)| {
        (h.max(holds), t.max(token))
    });
    (
        holds,
        token,
        majority_origin(yes().map(|(_, _, origin)| origin), majority),
    )
}
