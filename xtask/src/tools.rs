//! `cargo xtask simulate | chaos | bench`: build a tool of the workspace and run it.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use crate::install::{MARIADB, POSTGRES, find_or_install, find_or_install_redis};
use crate::test::workspace_command;
use crate::{cargo, exit_code, run_streaming, target_dir, workspace_root};

/// `cargo xtask simulate`: the simulation needs no server, only its own binary.
pub(crate) fn simulate(extra: &[String]) -> Result<ExitCode, String> {
    let simulator = built_as_the_tests_build_it("lock-sim")?;
    let mut run = Command::new(simulator);
    run.args(extra);
    Ok(exit_code(run_streaming(run)?))
}

/// Builds the binary `name` of the workspace the way `cargo xtask test` builds it (the
/// same packages, features and profile, so that nothing is compiled a second time with
/// other features after a test run) and returns its path. The binary's package has an
/// integration test, which is what makes a test build build the binary itself.
pub(crate) fn built_as_the_tests_build_it(name: &str) -> Result<PathBuf, String> {
    println!("xtask: building {name} (as the tests build it)...");
    let mut build = workspace_command(&["test", "--no-run", "--quiet"], &[]);
    // The profile nextest builds with in `cargo xtask test`.
    build.args(["--profile", "dev"]);
    let status = run_streaming(build)?;
    if !status.success() {
        return Err(format!("building {name} failed ({status})"));
    }
    Ok(target_dir().join("debug").join(name))
}

/// `cargo xtask chaos`: the harness lives in the `lock-chaos` crate; this builds and runs it.
pub(crate) fn chaos(extra: &[String]) -> Result<ExitCode, String> {
    let binary = find_or_install_redis()?;
    let postgres_wanted = extra
        .windows(2)
        .any(|pair| pair[0] == "--backend" && pair[1] == "postgres");
    let postgres = if postgres_wanted {
        Some(find_or_install(&POSTGRES)?)
    } else {
        None
    };
    // Found again by the harness itself (lock-testkit looks where Debian puts it).
    if extra
        .windows(2)
        .any(|pair| pair[0] == "--backend" && pair[1] == "mysql")
    {
        find_or_install(&MARIADB)?;
    }
    // The harness measures correctness, not speed: the tests' own build serves.
    let harness = built_as_the_tests_build_it("lock-chaos")?;
    let mut run = Command::new(harness);
    run.arg("run").args(extra).env("REDIS_SERVER_BIN", &binary);
    if let Some(postgres) = postgres {
        run.env("PG_BIN_DIR", postgres);
    }
    println!("xtask: lock-chaos run {}", extra.join(" "));
    Ok(exit_code(run_streaming(run)?))
}

/// `cargo xtask bench`: the measurements live in the `lock-bench` crate; this builds it
/// in release and runs it from the workspace root.
pub(crate) fn bench(extra: &[String]) -> Result<ExitCode, String> {
    let binary = find_or_install_redis()?;
    let postgres = find_or_install(&POSTGRES)?;
    // Found again by lock-bench itself (lock-testkit looks where Debian puts it).
    find_or_install(&MARIADB)?;
    println!("xtask: building lock-bench (release)...");
    let mut build = cargo();
    build.args(["build", "--quiet", "--release", "-p", "lock-bench"]);
    let status = run_streaming(build)?;
    if !status.success() {
        return Ok(exit_code(status));
    }
    let target = target_dir();
    let mut run = Command::new(target.join("release").join("lock-bench"));
    run.args(extra)
        .arg("--out")
        .arg(target.join("bench"))
        .current_dir(workspace_root())
        .env("REDIS_SERVER_BIN", &binary)
        .env("PG_BIN_DIR", &postgres);
    let started = Instant::now();
    let status = run_streaming(run)?;
    println!(
        "xtask: bench finished in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(exit_code(status))
}
