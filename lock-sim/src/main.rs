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

use lock_core::memory::HandOvers;

const USAGE: &str = "\
usage: lock-sim [--seeds N] [--first S] | --minutes M | --seed S | --mutants
                [--only OPS] [--faults F] [--mutant NAME]
  --seeds N     how many seeds to run (default 300)
  --first S     the first seed (default 0)
  --minutes M   run consecutive seeds, from a start chosen by the clock, for M minutes
  --seed S      replay one seed, printing every event, and check that it replays exactly
  --mutants     plant each known defect back in turn (r1, r2, r4, n2, n3, handed-place,
                no-offer); fails unless the invariants catch every one within its
                seed budget
  --only OPS    only these operations, comma-separated: mutex, fair, read, write,
                reenter (a fair and a plain guard of one holder), reenter-same, permits,
                leased (same seed and options: same run)
  --faults F    all (default), delays (nothing lost, copied, paused or cancelled), none
  --mutant NAME plant one known defect back in the store (as --mutants names them)";

/// What to run.
#[derive(Debug, PartialEq, Eq)]
enum Plan {
    Seeds { first: u64, count: u64 },
    For(Duration),
    Replay(u64),
    Mutants,
}

fn parse(args: &[String]) -> Result<(Plan, world::Workload), String> {
    let mut plan = Plan::Seeds {
        first: 0,
        count: 300,
    };
    let mut workload = world::Workload::default();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--only" => {
                let list = args.next().ok_or("--only needs operations")?;
                workload.ops = list
                    .split(',')
                    .map(|name| world::Op::named(name).ok_or(format!("no operation {name:?}")))
                    .collect::<Result<_, _>>()?;
                continue;
            }
            "--mutant" => {
                let name = args.next().ok_or("--mutant needs a name")?;
                let mutant = mutants::named(name).ok_or(format!("no mutant {name:?}"))?;
                workload.defect = Some(mutant.defect);
                continue;
            }
            "--mutants" => {
                plan = Plan::Mutants;
                continue;
            }
            "--faults" => {
                workload.faults = match args.next().map(String::as_str) {
                    Some("all") => world::Faults::All,
                    Some("delays") => world::Faults::Delays,
                    Some("none") => world::Faults::None,
                    other => {
                        return Err(format!("--faults takes all, delays or none, not {other:?}"));
                    }
                };
                continue;
            }
            _ => {}
        }
        let mut value = || -> Result<u64, String> {
            let value = args
                .next()
                .ok_or_else(|| format!("{flag} needs a number"))?;
            value
                .parse()
                .map_err(|_| format!("{flag} takes a number, not {value:?}"))
        };
        plan = match (flag.as_str(), plan) {
            ("--seeds", Plan::Seeds { first, .. }) => Plan::Seeds {
                first,
                count: value()?,
            },
            ("--first", Plan::Seeds { count, .. }) => Plan::Seeds {
                first: value()?,
                count,
            },
            ("--minutes", _) => Plan::For(Duration::from_secs(value()?.saturating_mul(60))),
            ("--seed", _) => Plan::Replay(value()?),
            ("--help" | "-h", _) => return Err(String::new()),
            (other, _) => return Err(format!("unknown argument {other:?}")),
        };
    }
    Ok((plan, workload))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (plan, workload) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("lock-sim: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
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
        let args = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let plan = |list: &[&str]| parse(&args(list)).map(|(plan, _)| plan);
        assert_eq!(
            plan(&[]),
            Ok(Plan::Seeds {
                first: 0,
                count: 300
            })
        );
        assert_eq!(
            plan(&["--seeds", "5", "--first", "9"]),
            Ok(Plan::Seeds { first: 9, count: 5 })
        );
        assert_eq!(
            plan(&["--minutes", "2"]),
            Ok(Plan::For(Duration::from_secs(120)))
        );
        assert_eq!(plan(&["--seed", "7"]), Ok(Plan::Replay(7)));
        let (_, workload) =
            parse(&args(&["--only", "mutex,leased", "--faults", "none"])).expect("valid");
        assert_eq!(workload.ops, [world::Op::Mutex, world::Op::Leased]);
        assert_eq!(workload.faults, world::Faults::None);
        assert!(parse(&args(&["--only", "mutex,bogus"])).is_err());
        assert!(parse(&args(&["--faults", "some"])).is_err());
        assert!(parse(&args(&["--seeds"])).is_err());
        assert!(parse(&args(&["--seeds", "x"])).is_err());
        assert!(parse(&args(&["--bogus"])).is_err());
        assert_eq!(plan(&["--mutants"]), Ok(Plan::Mutants));
        let (_, workload) = parse(&args(&["--mutant", "r1"])).expect("valid");
        assert_eq!(
            workload.defect,
            Some(lock_core::protocol::Defect::R1TakeUpGrantsAfresh)
        );
        assert!(parse(&args(&["--mutant", "r9"])).is_err());
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
