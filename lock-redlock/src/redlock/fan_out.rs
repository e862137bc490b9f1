//! Sending one request to every node at once, each call in a job of its own.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FuturesUnordered;
use lock_core::{Backend, Error};

use super::RedLock;
use crate::error::timed_out;

/// One node's answer to a request sent to every node: the node's index and its outcome.
/// Boxed, so that answers still due can be collected by a task of their own.
pub(super) type NodeCall<T> = Pin<Box<dyn Future<Output = (usize, Result<T, Error>)> + Send>>;

impl RedLock {
    /// Runs `call` on every node at once, each bounded by `timeout`.
    pub(super) fn on_all<T, F, Fut>(
        &self,
        timeout: Duration,
        call: F,
    ) -> FuturesUnordered<NodeCall<T>>
    where
        F: Fn(Arc<dyn Backend>) -> Fut,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.on_all_indexed(timeout, move |_, node| call(node))
    }

    /// [`RedLock::on_all`], telling `call` which node it runs on.
    pub(super) fn on_all_indexed<T, F, Fut>(
        &self,
        timeout: Duration,
        call: F,
    ) -> FuturesUnordered<NodeCall<T>>
    where
        F: Fn(usize, Arc<dyn Backend>) -> Fut,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                // Each call runs in its own task: it finishes even if this request is
                // dropped, so a late grant is still known to the node for release.
                let task = self.background.spawn(call(i, Arc::clone(node)));
                let answer: NodeCall<T> = Box::pin(async move {
                    let outcome = match task {
                        Err(err) => Err(err),
                        Ok(task) => match tokio::time::timeout(timeout, task).await {
                            Ok(Ok(result)) => result,
                            Ok(Err(join)) => {
                                Err(Error::protocol(format!("node task failed: {join}")))
                            }
                            Err(_) => Err(timed_out(timeout)),
                        },
                    };
                    (i, outcome)
                });
                answer
            })
            .collect()
    }
}

/// Work that must go on after its request has an answer could not start: outside a
/// runtime, once the one the RedLock was built in is gone. The nodes keep what they
/// granted until its lease ends.
pub(super) fn not_started(what: &'static str, err: &Error) {
    tracing::warn!(
        target: lock_core::TRACING_TARGET,
        error = %err.chain(),
        "{what} could not go on in the background"
    );
}
