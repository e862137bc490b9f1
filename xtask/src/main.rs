//! Workspace tasks, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//!
//! - `cargo xtask test [-- ARGS]`: makes sure `redis-server`, PostgreSQL's server
//!   binaries, `pgbouncer` and MariaDB exist (installing them with apt-get, `sudo -n apt-get` or
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

mod demo;
mod install;
mod test;
mod tools;

use demo::{demo, redis};
use test::test;
use tools::{bench, chaos, simulate};

use clap::{Parser, Subcommand};

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
    /// it only the tests whose names contain it (`cargo xtask test -p lock-postgres
    /// failover`; a test's name, not its file's); `--test TARGET` (a file: `--test
    /// handover`) or `-E EXPR` pick test targets or tests by nextest's filter expressions,
    /// and then no doctests run. `--no-run` builds the tests and runs none. After `--`,
    /// arguments go to `cargo test` instead of nextest.
    Test {
        #[arg(
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "ARGS"
        )]
        args: Vec<String>,
    },
    /// Runs the demo: against `$REDIS_URL`, else a throwaway local redis-server, else the
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

/// Where cargo builds: `$CARGO_TARGET_DIR`, else the workspace's `target`.
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

/// The workspace root: xtask's manifest directory's parent.
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// `$CARGO`, or `cargo`.
pub(crate) fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")))
}

/// Runs `command` with inherited stdio and waits for it.
pub(crate) fn run_streaming(mut command: Command) -> Result<ExitStatus, String> {
    command
        .status()
        .map_err(|e| format!("cannot run {command:?}: {e}"))
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the tokio runtime: {e}"))
}

pub(crate) fn exit_code(status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => ExitCode::FAILURE,
    }
}
