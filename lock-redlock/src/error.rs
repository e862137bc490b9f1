//! Failures of several nodes, reported together.

use std::fmt;

use lock_core::Error;

/// What each node answered when a quorum (or all parts) could not be reached. It is the
/// `source()` of the [`Error`] the operation returns.
#[derive(Debug)]
pub struct NodeErrors {
    /// `(node index, what went wrong)`, in node order; nodes that answered normally are
    /// not listed.
    pub nodes: Vec<(usize, Error)>,
    /// How many nodes there are.
    pub of: usize,
}

impl fmt::Display for NodeErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} nodes failed", self.nodes.len(), self.of)?;
        for (node, err) in &self.nodes {
            write!(f, "; node {node}: {err}")?;
            let mut source = std::error::Error::source(err);
            while let Some(cause) = source {
                write!(f, ": {cause}")?;
                source = cause.source();
            }
        }
        Ok(())
    }
}

impl std::error::Error for NodeErrors {}

/// The error a per-node call gave, or a timeout.
pub(crate) fn timed_out(node_timeout: std::time::Duration) -> Error {
    Error::connection("waiting for a node", Elapsed(node_timeout))
}

/// A node did not answer within the per-node timeout.
#[derive(Debug)]
struct Elapsed(std::time::Duration);

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no answer within the per-node timeout of {:?}", self.0)
    }
}

impl std::error::Error for Elapsed {}
