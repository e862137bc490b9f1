//! Where PostgreSQL's server binaries are on this machine.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The message shown when no PostgreSQL server binaries can be found.
pub(super) const NOT_FOUND: &str = "PostgreSQL's server binaries (initdb, postgres) not found: \
     install them (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) \
     or set PG_BIN_DIR to the directory holding them; `cargo xtask test` does this for you";

/// The directory holding `initdb`, `postgres` and `pg_isready`.
///
/// Looks at `$PG_BIN_DIR`, then `pg_config --bindir`, then the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian's layout), then `PATH`, `/usr/local/pgsql/bin`
/// and Homebrew's directories. Returns `None` if none of them has both programs.
#[must_use]
pub fn postgres_bin_dir() -> Option<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    let mut candidates: Vec<PathBuf> = Vec::new();
    candidates.extend(std::env::var_os("PG_BIN_DIR").map(PathBuf::from));
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        candidates.push(PathBuf::from(
            String::from_utf8_lossy(&output.stdout).trim().to_owned(),
        ));
    }
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    // Newest first: version directories sort numerically by their length, then text.
    debian.sort_by_key(|dir| {
        let version = dir.parent().and_then(Path::file_name).map(|v| {
            let v = v.to_string_lossy();
            (v.len(), v.into_owned())
        });
        std::cmp::Reverse(version)
    });
    candidates.extend(debian);
    candidates.extend(
        std::env::var_os("PATH")
            .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
            .unwrap_or_default(),
    );
    candidates.extend(
        [
            "/usr/local/pgsql/bin",
            "/opt/homebrew/bin",
            "/usr/local/bin",
        ]
        .iter()
        .map(PathBuf::from),
    );
    candidates.into_iter().find(|dir| has_both(dir))
}
