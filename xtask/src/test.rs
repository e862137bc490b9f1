//! `cargo xtask test`: the servers the tests need, then nextest (or `cargo test`) and the
//! doctests.

use std::process::{Command, ExitCode};
use std::time::Instant;

use crate::install::{
    MARIADB, PGBOUNCER, POSTGRES, find_or_install, find_or_install_redis, succeeds,
};
use crate::{cargo, exit_code, run_streaming};

/// nextest's exit code when its filters matched no test.
const NEXTEST_NO_TESTS_RUN: i32 = 4;

/// nextest's options that take a value (so that the value is not read as a filter).
const VALUED: &[&str] = &[
    "-p",
    "--package",
    "--exclude",
    "-E",
    "--filterset",
    "--filter-expr",
    "--test",
    "--bin",
    "--example",
    "--bench",
    "-F",
    "--features",
    "--profile",
    "--cargo-profile",
    "-j",
    "--jobs",
    "--test-threads",
    "--retries",
    "--partition",
    "--target",
];

/// nextest's options that pick test targets or tests by an expression; doctests are
/// none of those, so a run with one of them runs no doctests.
const PICKS_TARGETS: &[&str] = &[
    "--lib",
    "--bins",
    "--tests",
    "--examples",
    "--benches",
    "--all-targets",
    "--test",
    "--bin",
    "--example",
    "--bench",
    "-E",
    "--filterset",
    "--filter-expr",
];

/// `cargo xtask test`.
pub(crate) fn test(extra: &[String]) -> Result<ExitCode, String> {
    let started = Instant::now();
    let binary = find_or_install_redis()?;
    println!("xtask: using {}", binary.display());
    let postgres = find_or_install(&POSTGRES)?;
    println!("xtask: using PostgreSQL from {}", postgres.display());
    let pgbouncer = find_or_install(&PGBOUNCER)?;
    println!("xtask: using {}", pgbouncer.display());
    // Found again by the tests themselves (lock-testkit looks where Debian puts it).
    let mariadb = find_or_install(&MARIADB)?;
    println!("xtask: using {}", mariadb.display());
    let servers = [
        ("REDIS_SERVER_BIN", binary.as_os_str()),
        ("PG_BIN_DIR", postgres.as_os_str()),
        ("PGBOUNCER_BIN", pgbouncer.as_os_str()),
    ];
    // Most tests wait on servers they start, so nextest, which runs the tests of every
    // binary side by side (`.config/nextest.toml`), takes a fraction of the time of
    // `cargo test`, which runs one binary after another. Arguments for libtest (after
    // `--`) need `cargo test`.
    let nextest = !extra.iter().any(|arg| arg == "--") && has_nextest();
    // `--no-run` builds what the run would (nextest and cargo test both take it), so
    // that a later run starts at once; the doctests are built as they run.
    let builds_only = extra.iter().any(|arg| arg == "--no-run");
    let status = if nextest {
        // The `dev` profile, which the doctests below build with: under nextest's
        // default (`test`) every dependency would be compiled a second time for them.
        let profile: &[&str] = if extra.iter().any(|arg| arg.starts_with("--cargo-profile")) {
            &[]
        } else {
            &["--cargo-profile", "dev"]
        };
        let mut run = workspace_command(&["nextest", "run"], extra);
        run.args(profile);
        run.envs(servers);
        let status = run_streaming(run)?;
        match (status.success(), doctest_args(extra)) {
            (true, _) if builds_only => status,
            // nextest does not run doctests.
            (true, Some(doc_args)) => {
                let mut doc = workspace_command(&["test", "--doc"], &doc_args);
                doc.envs(servers);
                run_streaming(doc)?
            }
            (true, None) => {
                println!("xtask: doctests not run: the arguments pick test targets");
                status
            }
            (false, _) => status,
        }
    } else {
        println!("xtask: cargo-nextest not found (cargo install cargo-nextest); using cargo test");
        let mut run = workspace_command(&["test"], extra);
        run.envs(servers);
        run_streaming(run)?
    };
    let verdict = match status.code() {
        _ if status.success() && builds_only => "tests built",
        _ if status.success() => "tests passed",
        Some(NEXTEST_NO_TESTS_RUN) if nextest => {
            "no test matched the filters (a name matches test names, not file names: name a \
             file with --test NAME)"
        }
        _ => "tests failed",
    };
    println!(
        "xtask: {verdict} in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(exit_code(status))
}

/// What of nextest's arguments `extra` the doctests take: the packages picked and the
/// name filters. `None` when `extra` picks test targets (`--test conformance`, `-E ...`):
/// those are no doctests, and `cargo test --doc` refuses to mix them.
pub(crate) fn doctest_args(extra: &[String]) -> Option<Vec<String>> {
    let mut doc = Vec::new();
    let mut args = extra.iter();
    while let Some(arg) = args.next() {
        let option = arg.split('=').next().unwrap_or(arg);
        if PICKS_TARGETS.contains(&option) {
            return None;
        }
        let takes_value = VALUED.contains(&arg.as_str());
        if option == "-p" || option == "--package" || arg.starts_with("-p") {
            doc.push(arg.clone());
            if takes_value {
                doc.extend(args.next().cloned());
            }
        } else if takes_value {
            args.next();
        } else if !arg.starts_with('-') {
            doc.push(arg.clone());
        }
    }
    Some(doc)
}

/// `cargo SUBCOMMAND --workspace --all-features EXTRA` (without `--workspace` when
/// `extra` selects packages: `-p NAME` narrows the run, `--workspace` would override it).
pub(crate) fn workspace_command(subcommand: &[&str], extra: &[String]) -> Command {
    let mut cargo = cargo();
    cargo.args(subcommand);
    if !selects_packages(extra) {
        cargo.arg("--workspace");
    }
    cargo.arg("--all-features").args(extra);
    cargo
}

/// Whether `cargo nextest` is installed.
pub(crate) fn has_nextest() -> bool {
    succeeds(cargo().args(["nextest", "--version"]))
}

/// Whether cargo arguments (before any `--`) pick packages with `-p` / `--package`.
pub(crate) fn selects_packages(args: &[String]) -> bool {
    args.iter()
        .take_while(|arg| *arg != "--")
        .any(|arg| arg.starts_with("-p") || arg.starts_with("--package"))
}

#[cfg(test)]
mod tests {
    use super::doctest_args;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn the_doctests_take_the_packages_and_the_filters() {
        assert_eq!(
            doctest_args(&args("-p lock-postgres handover")),
            Some(args("-p lock-postgres handover"))
        );
        assert_eq!(
            doctest_args(&args("--package=lock-core --no-fail-fast -j 2 guard")),
            Some(args("--package=lock-core guard"))
        );
        assert_eq!(doctest_args(&[]), Some(Vec::new()));
    }

    #[test]
    fn a_run_that_picks_targets_runs_no_doctests() {
        assert_eq!(doctest_args(&args("-p lock-redlock --test races")), None);
        assert_eq!(doctest_args(&args("-E test(handover)")), None);
        assert_eq!(doctest_args(&args("-p lock-core --lib")), None);
    }
}
