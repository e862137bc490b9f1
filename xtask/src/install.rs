//! Finding the server programs the tests start (Redis, PostgreSQL, PgBouncer, MariaDB), or
//! installing them with apt-get where the machine allows, or saying exactly what to
//! install.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use lock_testkit::{mariadb_binaries, pgbouncer_binary, postgres_bin_dir, redis_server_binary};

use crate::run_streaming;

/// What to do when no redis-server is found.
pub(crate) const NOT_FOUND: &str = "redis-server not found: install it (Debian/Ubuntu: apt-get install \
     redis-server; macOS: brew install redis) or set REDIS_SERVER_BIN";

/// A server program the tests start, and how to get it.
pub(crate) struct Needed {
    /// What it is, in messages.
    pub(crate) what: &'static str,
    /// Finds it: the binary, or the directory of its binaries.
    pub(crate) find: fn() -> Option<PathBuf>,
    /// Debian's package and Homebrew's formula.
    pub(crate) apt: &'static str,
    pub(crate) brew: &'static str,
    /// What to do when it cannot be installed.
    pub(crate) not_found: &'static str,
}

pub(crate) const REDIS: Needed = Needed {
    what: "redis-server",
    find: redis_server_binary,
    apt: "redis-server",
    brew: "redis",
    not_found: NOT_FOUND,
};

pub(crate) const POSTGRES: Needed = Needed {
    what: "PostgreSQL's server binaries",
    find: postgres_bin_dir,
    apt: "postgresql",
    brew: "postgresql",
    not_found: "PostgreSQL not found: install it (Debian/Ubuntu: apt-get install postgresql; \
         macOS: brew install postgresql) or set PG_BIN_DIR to the directory of initdb",
};

pub(crate) const PGBOUNCER: Needed = Needed {
    what: "pgbouncer",
    find: pgbouncer_binary,
    apt: "pgbouncer",
    brew: "pgbouncer",
    not_found: "pgbouncer not found: install it (Debian/Ubuntu: apt-get install pgbouncer; \
         macOS: brew install pgbouncer) or set PGBOUNCER_BIN to its path",
};

pub(crate) const MARIADB: Needed = Needed {
    what: "MariaDB's server and tools",
    find: mariadb_server,
    apt: "mariadb-server",
    brew: "mariadb",
    not_found: "MariaDB not found: install it (Debian/Ubuntu: apt-get install mariadb-server \
         mariadb-client; macOS: brew install mariadb) or set MARIADB_BIN_DIR to the directory \
         of mariadbd and its tools",
};

/// The MariaDB server, when every program the tests need is there.
fn mariadb_server() -> Option<PathBuf> {
    mariadb_binaries().map(|found| found.server)
}

/// `redis-server`, installed with the system's package manager when missing.
pub(crate) fn find_or_install_redis() -> Result<PathBuf, String> {
    find_or_install(&REDIS)
}

/// What `needed` finds, installed with the system's package manager when missing.
pub(crate) fn find_or_install(needed: &Needed) -> Result<PathBuf, String> {
    if let Some(found) = (needed.find)() {
        return Ok(found);
    }
    println!("xtask: {} not found; trying to install it", needed.what);
    let apt = on_path("apt-get");
    if apt && is_root() {
        apt_install(&[], needed)?;
    } else if apt && succeeds(Command::new("sudo").args(["-n", "true"])) {
        apt_install(&["sudo", "-n"], needed)?;
    } else if on_path("brew") {
        let mut brew = Command::new("brew");
        brew.args(["install", needed.brew]);
        let what = format!("brew install {}", needed.brew);
        check(run_streaming(brew)?, &what, needed)?;
    }
    (needed.find)().ok_or_else(|| needed.not_found.to_owned())
}

/// `apt-get update && apt-get install -y <package>`, behind `prefix` (e.g. `sudo -n`).
pub(crate) fn apt_install(prefix: &[&str], needed: &Needed) -> Result<(), String> {
    for args in [&["update"][..], &["install", "-y", needed.apt][..]] {
        let words: Vec<&str> = prefix
            .iter()
            .copied()
            .chain(["apt-get"])
            .chain(args.iter().copied())
            .collect();
        let mut command = Command::new(words[0]);
        command
            .args(&words[1..])
            .env("DEBIAN_FRONTEND", "noninteractive");
        check(run_streaming(command)?, &words.join(" "), needed)?;
    }
    Ok(())
}

pub(crate) fn check(status: ExitStatus, what: &str, needed: &Needed) -> Result<(), String> {
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{what}` failed ({status}); {}", needed.not_found))
    }
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "0")
}

pub(crate) fn succeeds(command: &mut Command) -> bool {
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

pub(crate) fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| is_file(&dir.join(program))))
}

pub(crate) fn is_file(path: &Path) -> bool {
    path.metadata().is_ok_and(|meta| meta.is_file())
}
