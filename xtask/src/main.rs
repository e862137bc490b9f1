//! Workspace tasks, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//!
//! - `cargo xtask test [-- ARGS]`: makes sure `redis-server`, PostgreSQL's server
//!   binaries and `pgbouncer` exist (installing them with apt-get, `sudo -n apt-get` or
//!   brew when missing), then runs `cargo nextest run --workspace --all-features ARGS`
//!   and the doctests (or `cargo test ...` without nextest) with `REDIS_SERVER_BIN`,
//!   `PG_BIN_DIR` and `PGBOUNCER_BIN` set.
//! - `cargo xtask demo [-- ARGS]`: runs the `demo` example against `$REDIS_URL`, else
//!   against a throwaway local `redis-server`, else on the in-memory backend.
//! - `cargo xtask redis standalone` / `cargo xtask redis cluster [--masters N]`: starts a
//!   local topology, prints its URLs and keeps it up until Ctrl-C.
//! - `cargo xtask chaos [ARGS]`: builds `lock-chaos` and runs a fault-injection
//!   pass (`lock-chaos run ARGS`, default 60 s on the redis adapter).
//! - `cargo xtask simulate [ARGS]`: builds `lock-sim` and runs the deterministic
//!   simulation (`lock-sim ARGS`: `--seeds N`, `--minutes M`, `--seed S` to replay).
//! - `cargo xtask bench [--quick] [--scenario NAME]`: builds `lock-bench` in release and
//!   runs it; it writes `target/bench/report.{json,md,svg}`.
//! - `cargo xtask help` (or `--help` after any command): what each command takes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::time::Instant;

mod install;

use install::{PGBOUNCER, POSTGRES, find_or_install, find_or_install_redis, succeeds};

use clap::{Parser, Subcommand};
use lock_testkit::{RedisCluster, RedisServer, redis_server_binary};

/// Workspace tasks: tests against real servers, the demo, local Redis topologies, fault
/// injection, the simulation and the benchmark.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Runs every test (`cargo nextest run`, then the doctests; `cargo test` without
    /// nextest) against real redis-server, PostgreSQL and PgBouncer processes, installing
    /// them if missing.
    ///
    /// ARGS go to nextest: `-p CRATE` runs one crate's tests and doctests, a FILTER after
    /// it only those whose names contain it (`cargo xtask test -p lock-postgres
    /// handover`); `--test TARGET` or `-E EXPR` pick test targets or tests by nextest's
    /// filter expressions, and then no doctests run. After `--`, arguments go to
    /// `cargo test` instead of nextest.
    Test {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
    /// Runs the demo: against $`REDIS_URL`, else a throwaway local redis-server, else the
    /// in-memory backend.
    Demo {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
    /// Starts a local Redis topology, prints its URLs and keeps it up until Ctrl-C.
    #[command(subcommand)]
    Redis(Topology),
    /// Fault injection (`lock-chaos run ARGS`): worker processes, a fenced store, random
    /// crashes, pauses and server failures; fails on any violation.
    Chaos {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
    /// The deterministic simulation (`lock-sim ARGS`: `--seeds N`, `--minutes M`,
    /// `--seed S` to replay one run).
    Simulate {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
    /// The benchmark (`lock-bench ARGS`: `--quick`, `--scenario NAME`), built in release;
    /// writes target/bench/report.json, report.md and report.svg.
    Bench {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
}

#[derive(Debug, Clone, Copy, Subcommand)]
enum Topology {
    /// One redis-server.
    Standalone,
    /// A Redis Cluster.
    Cluster {
        /// How many masters.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
        masters: u16,
    },
}

const NOT_FOUND: &str = "redis-server not found: install it (Debian/Ubuntu: apt-get install \
     redis-server; macOS: brew install redis) or set REDIS_SERVER_BIN";

fn main() -> ExitCode {
    let Cli { task } = Cli::parse();
    // The pass-through commands take every argument as theirs; `--help` before any `--`
    // still asks for help, and running tests instead would surprise.
    if let Some(name) = task.asks_for_help() {
        return print_help(name);
    }
    let result = match task {
        Task::Test { args } => test(passthrough(&args)),
        Task::Demo { args } => demo(passthrough(&args)),
        Task::Redis(topology) => redis(topology),
        Task::Chaos { args } => chaos(passthrough(&args)),
        Task::Simulate { args } => simulate(passthrough(&args)),
        Task::Bench { args } => bench(passthrough(&args)),
    };
    result.unwrap_or_else(|message| {
        eprintln!("xtask: {message}");
        ExitCode::from(2)
    })
}

impl Task {
    /// The command's name when its pass-through arguments ask for help (`-h` or `--help`
    /// before any `--`).
    fn asks_for_help(&self) -> Option<&'static str> {
        let (name, args) = match self {
            Self::Test { args } => ("test", args),
            Self::Demo { args } => ("demo", args),
            Self::Chaos { args } => ("chaos", args),
            Self::Simulate { args } => ("simulate", args),
            Self::Bench { args } => ("bench", args),
            Self::Redis(_) => return None,
        };
        args.iter()
            .take_while(|arg| *arg != "--")
            .any(|arg| arg == "-h" || arg == "--help")
            .then_some(name)
    }
}

/// Prints the help of the command `name`.
fn print_help(name: &str) -> ExitCode {
    let mut cli = <Cli as clap::CommandFactory>::command();
    let Some(command) = cli.find_subcommand_mut(name) else {
        eprintln!("xtask: no command {name}");
        return ExitCode::from(2);
    };
    let mut command = command.clone().bin_name(format!("cargo xtask {name}"));
    match command.print_long_help() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: cannot print the help: {err}");
            ExitCode::from(2)
        }
    }
}

/// The arguments after the command, without a leading `--`.
fn passthrough(rest: &[String]) -> &[String] {
    match rest.split_first() {
        Some((first, tail)) if first == "--" => tail,
        _ => rest,
    }
}

/// `cargo xtask test`.
fn test(extra: &[String]) -> Result<ExitCode, String> {
    let started = Instant::now();
    let binary = find_or_install_redis()?;
    println!("xtask: using {}", binary.display());
    let postgres = find_or_install(&POSTGRES)?;
    println!("xtask: using PostgreSQL from {}", postgres.display());
    let pgbouncer = find_or_install(&PGBOUNCER)?;
    println!("xtask: using {}", pgbouncer.display());
    let servers = [
        ("REDIS_SERVER_BIN", binary.as_os_str()),
        ("PG_BIN_DIR", postgres.as_os_str()),
        ("PGBOUNCER_BIN", pgbouncer.as_os_str()),
    ];
    // Most tests wait on servers they start, so nextest, which runs the tests of every
    // binary side by side (`.config/nextest.toml`), takes a fraction of the time of
    // `cargo test`, which runs one binary after another. Arguments for libtest (after
    // `--`) need `cargo test`.
    let status = if !extra.iter().any(|arg| arg == "--") && has_nextest() {
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
    println!(
        "xtask: tests {} in {:.1} s",
        if status.success() { "passed" } else { "failed" },
        started.elapsed().as_secs_f64()
    );
    Ok(exit_code(status))
}

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

/// What of nextest's arguments `extra` the doctests take: the packages picked and the
/// name filters. `None` when `extra` picks test targets (`--test conformance`, `-E ...`):
/// those are no doctests, and `cargo test --doc` refuses to mix them.
fn doctest_args(extra: &[String]) -> Option<Vec<String>> {
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
fn workspace_command(subcommand: &[&str], extra: &[String]) -> Command {
    let mut cargo = cargo();
    cargo.args(subcommand);
    if !selects_packages(extra) {
        cargo.arg("--workspace");
    }
    cargo.arg("--all-features").args(extra);
    cargo
}

/// Whether `cargo nextest` is installed.
fn has_nextest() -> bool {
    succeeds(cargo().args(["nextest", "--version"]))
}

/// `cargo xtask simulate`: the simulation needs no server, only its own binary.
fn simulate(extra: &[String]) -> Result<ExitCode, String> {
    let simulator = built_as_the_tests_build_it("lock-sim")?;
    let mut run = Command::new(simulator);
    run.args(extra);
    Ok(exit_code(run_streaming(run)?))
}

/// Builds the binary `name` of the workspace the way `cargo xtask test` builds it (the
/// same packages, features and profile, so that nothing is compiled a second time with
/// other features after a test run) and returns its path. The binary's package has an
/// integration test, which is what makes a test build build the binary itself.
fn built_as_the_tests_build_it(name: &str) -> Result<PathBuf, String> {
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
fn chaos(extra: &[String]) -> Result<ExitCode, String> {
    let binary = find_or_install_redis()?;
    let postgres_wanted = extra
        .windows(2)
        .any(|pair| pair[0] == "--backend" && pair[1] == "postgres");
    let postgres = if postgres_wanted {
        Some(find_or_install(&POSTGRES)?)
    } else {
        None
    };
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
fn bench(extra: &[String]) -> Result<ExitCode, String> {
    let binary = find_or_install_redis()?;
    let postgres = find_or_install(&POSTGRES)?;
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

/// Where cargo builds: `$CARGO_TARGET_DIR`, else the workspace's `target`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

/// The workspace root: xtask's manifest directory's parent.
fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Whether cargo arguments (before any `--`) pick packages with `-p` / `--package`.
fn selects_packages(args: &[String]) -> bool {
    args.iter()
        .take_while(|arg| *arg != "--")
        .any(|arg| arg.starts_with("-p") || arg.starts_with("--package"))
}

/// `cargo xtask demo`: builds the demo first, showing cargo's progress, then starts a
/// throwaway redis-server (unless `REDIS_URL` names one), then runs the demo.
fn demo(extra: &[String]) -> Result<ExitCode, String> {
    let runtime = runtime()?;
    let started = Instant::now();
    // Built as the tests build the workspace (dev profile, every feature), so that a
    // newcomer who runs the demo and then the tests compiles the dependencies once.
    println!(
        "xtask: building the demo (cargo's progress below; the first build takes a few \
         minutes, and the tests reuse it)"
    );
    let building = workspace_command(&["build", "--bin", "demo"], &[]);
    let status = run_streaming(building)?;
    if !status.success() {
        return Ok(exit_code(status));
    }
    println!(
        "xtask: demo built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut server = None;
    let mut redis_url = std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty());
    match (&redis_url, redis_server_binary()) {
        (Some(url), _) => println!("xtask: using REDIS_URL={url}"),
        (None, Some(binary)) => {
            println!(
                "xtask: starting a throwaway redis-server ({}) on a free port",
                binary.display()
            );
            let starting = Instant::now();
            let started = runtime.block_on(RedisServer::start());
            println!(
                "xtask: redis-server is up on 127.0.0.1:{} after {} ms",
                started.port(),
                starting.elapsed().as_millis()
            );
            redis_url = Some(started.url());
            server = Some(started);
        }
        (None, None) => println!(
            "xtask: no REDIS_URL and no redis-server found; the demo falls back to the \
             in-memory backend"
        ),
    }
    println!("xtask: running the demo");
    let mut demo = Command::new(target_dir().join("debug").join("demo"));
    demo.args(extra);
    match &redis_url {
        Some(url) => demo.env("REDIS_URL", url),
        None => demo.env_remove("REDIS_URL"),
    };
    let status = runtime.block_on(wait_through_ctrl_c(demo));
    if let Some(server) = server {
        drop(server);
        println!("xtask: stopped the throwaway redis-server");
    }
    Ok(exit_code(status?))
}

/// `cargo xtask redis standalone | cluster [--masters N]`.
fn redis(topology: Topology) -> Result<ExitCode, String> {
    let runtime = runtime()?;
    if redis_server_binary().is_none() {
        return Err(NOT_FOUND.to_owned());
    }
    match topology {
        Topology::Standalone => runtime.block_on(async {
            let server = RedisServer::start().await;
            println!("standalone redis-server: {}", server.url());
            hold_until_ctrl_c().await;
            drop(server);
            println!("stopped");
        }),
        Topology::Cluster { masters } => {
            let masters = usize::from(masters);
            runtime.block_on(async {
                let cluster = RedisCluster::start(masters).await;
                println!("redis cluster with {masters} masters:");
                for url in cluster.urls() {
                    println!("  {url}");
                }
                hold_until_ctrl_c().await;
                drop(cluster);
                println!("stopped");
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn hold_until_ctrl_c() {
    println!("press Ctrl-C to stop");
    if let Err(e) = tokio::signal::ctrl_c().await {
        eprintln!("xtask: cannot wait for Ctrl-C ({e}); stopping");
    }
}

/// `$CARGO`, or `cargo`.
fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")))
}

/// Runs `command` with inherited stdio and waits for it.
fn run_streaming(mut command: Command) -> Result<ExitStatus, String> {
    command
        .status()
        .map_err(|e| format!("cannot run {command:?}: {e}"))
}

/// Runs `command` with inherited stdio; a Ctrl-C reaches the child (same process group)
/// while xtask keeps waiting for it, so cleanup after it still happens.
async fn wait_through_ctrl_c(command: Command) -> Result<ExitStatus, String> {
    let mut command = tokio::process::Command::from(command);
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", command.as_std()))?;
    loop {
        tokio::select! {
            status = child.wait() => {
                return status.map_err(|e| format!("waiting for {:?}: {e}", command.as_std()));
            }
            _ = tokio::signal::ctrl_c() => {}
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))
}

fn exit_code(status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
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
