//! `distlock`: an operator's view of the locks in a store.
//!
//! ```text
//! distlock [--url URL] [--json] ls [PREFIX]        held locks, by name prefix
//! distlock [--url URL] [--json] show NAME          holder, lease, token, waiters
//! distlock [--url URL] [--json] watch NAME         show, again every second
//! distlock [--url URL] [--json] force-unlock NAME  asks first; prints who held it
//! distlock [--url URL] functions load             the lock functions, on every primary
//! ```
//!
//! The URL (or `DISTLOCK_URL`) takes every form the library does: `redis://`,
//! `rediss://`, `redis+cluster://`, `redis+sentinel://`, `postgres://`, `mysql://`.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use distlock::{Error, LockInfo, Locks};

mod connect;
mod render;

/// Who holds a lock, who waits for it, and force-unlocking it, on Redis (every topology)
/// and PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "distlock", version)]
struct Cli {
    /// The store: redis://, rediss://, redis+cluster://, redis+sentinel:// or
    /// postgres://, mysql:// (the forms the library takes).
    #[arg(long, env = "DISTLOCK_URL", global = true, hide_env_values = true)]
    url: Option<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(flatten)]
    Locks(LockCommand),
    /// Redis 7 and later: the library of lock functions that clients call instead of
    /// scripts (read "Functions instead of scripts" in lock-redis's README).
    Functions {
        #[command(subcommand)]
        action: Functions,
    },
}

/// What an operator asks of the locks themselves.
#[derive(Debug, Subcommand)]
enum LockCommand {
    /// Lists held locks whose names start with PREFIX (every lock without one). Walks
    /// the store a step at a time (SCAN on Redis, on every master of a cluster).
    Ls {
        /// The names' prefix.
        #[arg(default_value = "")]
        prefix: String,
        /// At most this many names.
        #[arg(long, default_value_t = 1000)]
        limit: usize,
    },
    /// Shows who holds NAME (client name, host, process, owner id), since when, the lease
    /// left, the fencing token and how many wait.
    Show {
        /// The lock's name.
        name: String,
    },
    /// Shows NAME again and again, the lease counting down, until Ctrl-C.
    Watch {
        /// The lock's name.
        name: String,
        /// Milliseconds between two looks.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// Stop after this many looks (default: until Ctrl-C).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Deletes NAME whoever holds it and wakes its waiters. Prints who held it. The
    /// holder learns at its next renewal; read "Force-unlocking a lock" in the
    /// operations guide (docs/operations.md) before you do this to a live holder.
    ForceUnlock {
        /// The lock's name.
        name: String,
        /// Do not ask for confirmation (for scripts: with nothing to read on stdin, the
        /// command refuses unless this is given).
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
enum Functions {
    /// Loads the library on every primary (again, harmlessly, where it is loaded), for
    /// clients whose user may call the functions (`+fcall`) but not load them. Run it
    /// with a user allowed `FUNCTION LOAD`, after each upgrade of this library and on
    /// every new primary.
    Load,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("distlock: cannot start a runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("distlock: {}", err.chain());
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode, Error> {
    let Some(url) = cli.url.as_deref() else {
        eprintln!("distlock: no store: pass --url URL or set DISTLOCK_URL");
        return Ok(ExitCode::from(2));
    };
    let json = cli.json;
    match cli.command {
        Command::Functions {
            action: Functions::Load,
        } => {
            let library = connect::load_functions(url).await?;
            println!("{}", render::functions_loaded(library, json));
            Ok(ExitCode::SUCCESS)
        }
        Command::Locks(command) => {
            let locks = connect::locks(url).await?;
            let code = on_locks(&locks, command, json).await?;
            locks.shutdown().await;
            Ok(code)
        }
    }
}

async fn on_locks(locks: &Locks, command: LockCommand, json: bool) -> Result<ExitCode, Error> {
    Ok(match command {
        LockCommand::Ls { prefix, limit } => {
            let names = locks.held_names(&prefix, limit).await?;
            println!("{}", render::names(&names, &prefix, json));
            ExitCode::SUCCESS
        }
        LockCommand::Show { name } => {
            let info = locks.describe(&name).await?;
            println!("{}", render::lock(&info, json));
            ExitCode::SUCCESS
        }
        LockCommand::Watch {
            name,
            interval_ms,
            count,
        } => {
            watch(
                locks,
                &name,
                Duration::from_millis(interval_ms),
                count,
                json,
            )
            .await?;
            ExitCode::SUCCESS
        }
        LockCommand::ForceUnlock { name, yes } => force_unlock(locks, &name, yes, json).await?,
    })
}

async fn watch(
    locks: &Locks,
    name: &str,
    interval: Duration,
    count: Option<u64>,
    json: bool,
) -> Result<(), Error> {
    let mut shown = 0u64;
    loop {
        let info = locks.describe(name).await?;
        println!("{}", render::lock(&info, json));
        shown += 1;
        if count.is_some_and(|count| shown >= count) {
            return Ok(());
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// Asks unless `yes`, deletes the lock, and prints who held it before.
async fn force_unlock(locks: &Locks, name: &str, yes: bool, json: bool) -> Result<ExitCode, Error> {
    let before = locks.describe(name).await?;
    if !yes {
        let refusal = match confirmed(&before)? {
            Answer::Confirmed => None,
            Answer::Other => Some("the name typed was not the lock's (--yes skips the question)"),
            Answer::Nothing => Some(
                "no answer came (stdin is closed or not a terminal); pass --yes to \
                 force-unlock without asking",
            ),
        };
        if let Some(refusal) = refusal {
            eprintln!("distlock: not unlocked: {refusal}");
            return Ok(ExitCode::from(3));
        }
    }
    let released = locks.mutex(name).force_unlock().await?;
    println!("{}", render::forced(&before, released, json));
    Ok(ExitCode::SUCCESS)
}

/// What the operator answered when asked to type the lock's name back.
enum Answer {
    Confirmed,
    Other,
    /// Stdin ended before a line (closed, or `/dev/null`).
    Nothing,
}

/// Shows who holds the lock and asks for its name to be typed back.
fn confirmed(before: &LockInfo) -> Result<Answer, Error> {
    eprintln!("{}", render::lock(before, false));
    eprint!("type the lock's name to force-unlock it: ");
    std::io::stderr()
        .flush()
        .map_err(|err| Error::protocol(format!("writing the prompt: {err}")))?;
    let mut answer = String::new();
    let read = std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|err| Error::protocol(format!("reading the answer: {err}")))?;
    Ok(if read == 0 {
        Answer::Nothing
    } else if answer.trim_end_matches(['\r', '\n']) == before.name {
        Answer::Confirmed
    } else {
        Answer::Other
    })
}
