//! The mutation check (`--mutants`): defects that reviews found in the store, planted
//! back one at a time; the simulation must catch each within its seed budget.

use std::process::ExitCode;
use std::time::Instant;

use lock_core::protocol::Defect;

use crate::world::{self, Op};

/// A defect planted back, and the seeds the simulation may take to catch it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mutant {
    pub(crate) name: &'static str,
    pub(crate) defect: Defect,
    /// What it is, in the words of the review that found it.
    what: &'static str,
    /// Seeds run before the check gives up on it (the check then fails).
    budget: u64,
    /// The operations its runs draw from, when not every one: where the defect lives.
    ops: Option<&'static [Op]>,
}

/// Every mutant `--mutants` runs.
pub(crate) const MUTANTS: [Mutant; 7] = [
    Mutant {
        name: "r1",
        defect: Defect::R1TakeUpGrantsAfresh,
        what: "R1: a take-up that finds its handed hold revoked is granted afresh",
        budget: 300,
        ops: None,
    },
    Mutant {
        name: "r2",
        defect: Defect::R2CancelLeavesNoEnd,
        what: "R2: a cancellation leaves no end, so a late copy takes the lock for nobody",
        budget: 300,
        ops: None,
    },
    Mutant {
        name: "r4",
        defect: Defect::R4QuarantineOfKnownLeases,
        what: "R4: a failover's quarantine lasts the longest lease the replica knows of",
        budget: 300,
        ops: None,
    },
    Mutant {
        name: "n2",
        defect: Defect::N2ReleaseCountsDown,
        what: "N2: a release counts its owner's hold down, whatever grant it names, and \
               a copy of it runs again",
        budget: 300,
        ops: None,
    },
    Mutant {
        name: "n3",
        defect: Defect::N3ReleaseEndsAnyGrant,
        what: "N3: a release of a grant that is not alive ends the owner's latest grant",
        budget: 300,
        // It needs one owner's second grant beside a lapsed one: re-entries.
        ops: Some(&[Op::Reenter, Op::Mutex, Op::Fair]),
    },
    Mutant {
        name: "handed-place",
        defect: Defect::HandedHoldLastsThePlace,
        what: "issue 48: a handed hold lasts the waiter's place, not its lease",
        budget: 300,
        ops: None,
    },
    Mutant {
        name: "no-offer",
        defect: Defect::NoOfferToOthers,
        what: "issue 48: a release hands a mutex to our waiter while a client of another \
               library waits, which then starves",
        budget: 300,
        ops: None,
    },
];

/// The mutant named `name` on the command line.
pub(crate) fn named(name: &str) -> Option<Mutant> {
    MUTANTS.iter().find(|mutant| mutant.name == name).copied()
}

/// Runs every mutant in turn over `workload`; fails unless each is caught.
pub(crate) fn run_all(workload: &world::Workload) -> ExitCode {
    let started = Instant::now();
    let mut missed = Vec::new();
    for mutant in MUTANTS {
        let planted = world::Workload {
            defect: Some(mutant.defect),
            ops: mutant
                .ops
                .map_or_else(|| workload.ops.clone(), <[Op]>::to_vec),
            ..workload.clone()
        };
        let caught = (0..mutant.budget).find_map(|seed| {
            let outcome = world::run(seed, &planted, false);
            outcome.violation.map(|violation| (seed, violation))
        });
        match caught {
            Some((seed, violation)) => println!(
                "mutant {} ({}): caught by seed {seed}, the {} seed run: {violation}",
                mutant.name,
                mutant.what,
                ordinal(seed + 1)
            ),
            None => {
                println!(
                    "mutant {} ({}): NOT CAUGHT in {} seeds",
                    mutant.name, mutant.what, mutant.budget
                );
                missed.push(mutant.name);
            }
        }
    }
    let took = started.elapsed().as_secs_f64();
    if missed.is_empty() {
        println!(
            "lock-sim: every one of {} mutants caught ({took:.1} s)",
            MUTANTS.len()
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "lock-sim: mutants not caught: {} ({took:.1} s)",
            missed.join(", ")
        );
        ExitCode::FAILURE
    }
}

fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}
