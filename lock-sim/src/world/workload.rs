//! What a run does: the operations tasks draw, and the fault profile.

use super::PROFILE;
use crate::faults::Profile;

/// What an operation works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Mutex,
    Fair,
    Read,
    Write,
    /// A fair and a plain guard of one explicit holder, on one name.
    Reenter,
    /// Two guards of one explicit holder and one kind, on one name.
    ReenterSame,
    Permits,
    Leased,
    /// A waiter for more plain permits than exist, and a waiter for one beside it in
    /// the same client.
    Beyond,
}

/// The operations tasks draw from, some more often than others.
pub(crate) const OPS: [Op; 11] = [
    Op::Mutex,
    Op::Mutex,
    Op::Fair,
    Op::Read,
    Op::Write,
    Op::Reenter,
    Op::ReenterSame,
    Op::Reenter,
    Op::Permits,
    Op::Leased,
    Op::Beyond,
];

impl Op {
    /// The operation named `name` on the command line.
    pub(crate) fn named(name: &str) -> Option<Self> {
        Some(match name {
            "mutex" => Self::Mutex,
            "fair" => Self::Fair,
            "read" => Self::Read,
            "write" => Self::Write,
            "reenter" => Self::Reenter,
            "reenter-same" => Self::ReenterSame,
            "permits" => Self::Permits,
            "leased" => Self::Leased,
            "beyond" => Self::Beyond,
            _ => return None,
        })
    }
}

/// What a run exercises: the operations its tasks draw from, and the faults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Workload {
    pub(crate) ops: Vec<Op>,
    pub(crate) faults: Faults,
    /// A defect of the past planted back in the store (the mutation check).
    pub(crate) defect: Option<lock_core::protocol::Defect>,
}

/// Which faults the network and the tasks bring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Faults {
    /// Every fault.
    All,
    /// Delays only: nothing is lost, copied, paused or cancelled.
    Delays,
    /// None at all.
    None,
}

impl Faults {
    /// The network's faults.
    pub(super) fn profile(self) -> Profile {
        let quiet = Profile {
            fail_before: 0,
            lose_reply: 0,
            late_copy: 0,
            ..PROFILE
        };
        match self {
            Self::All => PROFILE,
            Self::Delays => quiet,
            Self::None => Profile {
                delay: 0,
                long_delay: 0,
                ..quiet
            },
        }
    }
}

impl Default for Workload {
    fn default() -> Self {
        Self {
            ops: OPS.to_vec(),
            faults: Faults::All,
            defect: None,
        }
    }
}
