//! `lock-sim`: the deterministic simulation of the lock client (`cargo xtask simulate`).
//!
//! Each seed is one run of the real lock-core client (three clients, nine tasks, every
//! lock kind and both semaphores, and on one mutex a client of another library and
//! three busy contenders) over the memory backend, on a single-threaded runtime
//! whose clock is simulated (it jumps to the next timer when every task waits), behind a
//! fault layer that delays, loses and duplicates requests and replies and pauses clients
//! past their leases. The tasks cancel their futures at random points. Invariants are
//! checked after every operation and every simulated millisecond; a failure prints its
//! seed and the run's latest events, and `--seed N` replays that run exactly, printing
//! every event.
//!
//! ```text
//! lock-sim [--seeds N] [--first S]    run seeds S..S+N (default 0 and 300)
//! lock-sim --minutes M                run seeds from a clock-chosen start for M minutes
//! lock-sim --seed S                   replay seed S, printing every event
//! lock-sim --mutants                  plant each known defect back in turn; fail
//!                                     unless every one is caught
//! ... [--only OP,OP] [--faults all|delays|none] [--mutant NAME]
//!                                     only these operations; fewer faults; a defect
//! ```
//!
//! A check that has never been seen to fail proves little: `--mutants` plants back, one
//! at a time, defects that reviews found in the store (see `mutants::MUTANTS`), runs seeds
//! until the invariants catch each, and prints how many seeds each took.

mod faults;
mod mutants;
mod rng;
mod trace;
mod world;

/// Sleeps for `duration` of simulated time; not at all for none (a timer due now would
/// fire in an order the runtime's ticks decide, not the run).
async fn nap(duration: Duration) {
    if !duration.is_zero() {
        tokio::time::sleep(duration).await;
    }
}

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use lock_core::memory::HandOvers;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "lock-sim",
    about = "The deterministic simulation of the lock client: seeded, replayable runs \
             with every invariant checked after every step"
)]
struct Args {
    /// How many seeds to run
    #[arg(long, default_value_t = 300, value_name = "N")]
    seeds: u64,
    /// The first seed
    #[arg(long, default_value_t = 0, value_name = "S")]
    first: u64,
    /// Run consecutive seeds, from a start chosen by the clock, for M minutes
    #[arg(long, value_name = "M", conflicts_with_all = ["seed", "mutants"])]
    minutes: Option<u64>,
    /// Replay one seed, printing every event, and check that it replays exactly
    #[arg(long, value_name = "S", conflicts_with = "mutants")]
    seed: Option<u64>,
    /// Plant each known defect back in turn (r1, r2, r4, n2, n3, handed-place,
    /// no-offer); fails unless the invariants catch every one within its seed budget
    #[arg(long)]
    mutants: bool,
    /// Only these operations, comma-separated: mutex, fair, read, write, reenter (a fair
    /// and a plain guard of one holder), reenter-same, permits, leased, beyond (same
    /// seed and options: same run)
    #[arg(long, value_name = "OPS", value_delimiter = ',', value_parser = operation)]
    only: Vec<world::Op>,
    /// The faults: all, delays (nothing lost, copied, paused or cancelled), none
    #[arg(long, value_name = "F", default_value = "all", value_parser = faults)]
    faults: world::Faults,
    /// Plant one known defect back in the store (as --mutants names them)
    #[arg(long, value_name = "NAME", value_parser = mutant)]
    mutant: Option<lock_core::protocol::Defect>,
}

fn operation(name: &str) -> Result<world::Op, String> {
    world::Op::named(name).ok_or(format!("no operation {name:?}"))
}

fn faults(name: &str) -> Result<world::Faults, String> {
    match name {
        "all" => Ok(world::Faults::All),
        "delays" => Ok(world::Faults::Delays),
        "none" => Ok(world::Faults::None),
        other => Err(format!("all, delays or none, not {other:?}")),
    }
}

fn mutant(name: &str) -> Result<lock_core::protocol::Defect, String> {
    mutants::named(name)
        .map(|mutant| mutant.defect)
        .ok_or(format!("no mutant {name:?}"))
}

/// What to run.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Seeds { first: u64, count: u64 },
    For(Duration),
    Replay(u64),
    Mutants,
}

impl Args {
    /// What the command line asks to run, over which workload.
    fn plan(&self) -> (Plan, world::Workload) {
        let plan = match (self.minutes, self.seed) {
            _ if self.mutants => Plan::Mutants,
            (Some(minutes), _) => Plan::For(Duration::from_secs(minutes.saturating_mul(60))),
            (None, Some(seed)) => Plan::Replay(seed),
            (None, None) => Plan::Seeds {
                first: self.first,
                count: self.seeds,
            },
        };
        let mut workload = world::Workload {
            faults: self.faults,
            defect: self.mutant,
            ..world::Workload::default()
        };
        if !self.only.is_empty() {
            workload.ops.clone_from(&self.only);
        }
        (plan, workload)
    }
}

fn main() -> ExitCode {
    let (plan, workload) = Args::parse().plan();
    let started = Instant::now();
    match plan {
        Plan::Replay(seed) => replay(seed, &workload),
        Plan::Mutants => mutants::run_all(&workload),
        Plan::Seeds { first, count } => {
            let mut handed = HandOvers::default();
            let failed = (first..first.saturating_add(count))
                .find(|&seed| !passes(seed, &workload, &mut handed));
            report(failed, count, started, handed)
        }
        Plan::For(budget) => {
            let first = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_secs() << 20);
            let mut ran = 0;
            let mut failed = None;
            let mut handed = HandOvers::default();
            while started.elapsed() < budget {
                let seed = first + ran;
                ran += 1;
                if !passes(seed, &workload, &mut handed) {
                    failed = Some(seed);
                    break;
                }
            }
            report(failed, ran, started, handed)
        }
    }
}

/// Runs `seed`, adding its store's hand-overs to `handed`; on a violation prints it,
/// the seed and the latest events.
fn passes(seed: u64, workload: &world::Workload, handed: &mut HandOvers) -> bool {
    let outcome = world::run(seed, workload, false);
    add(handed, outcome.hand_overs);
    let Some(violation) = outcome.violation else {
        return true;
    };
    println!("seed {seed}: {violation}");
    println!(
        "latest events (replay with `cargo xtask simulate --seed {seed}` and the same options):"
    );
    for line in &outcome.latest {
        println!("  {line}");
    }
    false
}

fn add(total: &mut HandOvers, run: HandOvers) {
    total.made += run.made;
    total.made_of_fair_locks += run.made_of_fair_locks;
    total.made_of_write_locks += run.made_of_write_locks;
    total.taken_up += run.taken_up;
    total.given_back += run.given_back;
    total.released_before_taken_up += run.released_before_taken_up;
}

/// What the runs' stores did with hand-overs: that the runs exercised them.
fn hand_overs(handed: HandOvers) -> String {
    format!(
        "hand-overs: {} made ({} of fair locks, {} of write locks), {} taken up, {} released \
         (held from the notification) before their take-up, {} given back by waiters that \
         gave up",
        handed.made,
        handed.made_of_fair_locks,
        handed.made_of_write_locks,
        handed.taken_up,
        handed.released_before_taken_up,
        handed.given_back
    )
}

fn report(failed: Option<u64>, ran: u64, started: Instant, handed: HandOvers) -> ExitCode {
    match failed {
        Some(seed) => {
            println!("lock-sim: seed {seed} broke an invariant");
            ExitCode::FAILURE
        }
        None => {
            println!(
                "lock-sim: {ran} seeds, every invariant held ({:.1} s); {}",
                started.elapsed().as_secs_f64(),
                hand_overs(handed)
            );
            ExitCode::SUCCESS
        }
    }
}

/// Runs `seed` twice: once printing every event, once more to check that it replays
/// exactly (the same events at the same simulated times).
fn replay(seed: u64, workload: &world::Workload) -> ExitCode {
    let first = world::run(seed, workload, true);
    let again = world::run(seed, workload, false);
    println!(
        "seed {seed}: {} events, digest {:016x}; replayed: {} events, digest {:016x}",
        first.digest.1, first.digest.0, again.digest.1, again.digest.0
    );
    println!("{}", hand_overs(first.hand_overs));
    if first.digest != again.digest {
        println!("lock-sim: seed {seed} did not replay exactly");
        return ExitCode::FAILURE;
    }
    match first.violation {
        Some(violation) => {
            println!("seed {seed}: {violation}");
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_choose_the_plan() {
        let parse = |list: &[&str]| {
            let args = std::iter::once("lock-sim").chain(list.iter().copied());
            Args::try_parse_from(args).map(|args| args.plan())
        };
        let plan = |list: &[&str]| parse(list).map(|(plan, _)| plan).ok();
        let seeds = |first, count| Some(Plan::Seeds { first, count });
        assert_eq!(plan(&[]), seeds(0, 300));
        assert_eq!(plan(&["--seeds", "5", "--first", "9"]), seeds(9, 5));
        assert_eq!(
            plan(&["--minutes", "2"]),
            Some(Plan::For(Duration::from_secs(120)))
        );
        assert_eq!(plan(&["--seed", "7"]), Some(Plan::Replay(7)));
        let (_, workload) = parse(&["--only", "mutex,leased", "--faults", "none"]).expect("valid");
        assert_eq!(workload.ops, [world::Op::Mutex, world::Op::Leased]);
        assert_eq!(workload.faults, world::Faults::None);
        for refused in [
            &["--only", "mutex,bogus"][..],
            &["--faults", "some"],
            &["--seeds"],
            &["--seeds", "x"],
            &["--bogus"],
            &["--seed", "1", "--mutants"],
            &["--mutant", "r9"],
        ] {
            assert!(parse(refused).is_err(), "{refused:?}");
        }
        assert_eq!(plan(&["--mutants"]), Some(Plan::Mutants));
        let (_, workload) = parse(&["--mutant", "r1"]).expect("valid");
        assert_eq!(
            workload.defect,
            Some(lock_core::protocol::Defect::R1TakeUpGrantsAfresh)
        );
    }

    /// A seed replays exactly: the same events at the same simulated times.
    #[test]
    fn a_seed_replays_exactly() {
        for seed in [1, 2] {
            let workload = world::Workload::default();
            let (first, again) = (
                world::run(seed, &workload, false),
                world::run(seed, &workload, false),
            );
            assert_eq!(first.digest, again.digest, "seed {seed}");
            assert!(first.digest.1 > 100, "a run has events");
        }
    }
}
