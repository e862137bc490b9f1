//! Data directories made once per installation and copied for each server: making one
//! (`initdb`, `mariadb-install-db`) takes seconds of CPU, a copy milliseconds, and a test
//! run starts hundreds of servers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a server makes `template` before [`put_in_place`] renames it: a path of its
/// own, as tests that run as threads of one process (`cargo test`) may each make the
/// same template at once, and as processes (nextest) too.
pub(crate) fn making(template: &Path) -> PathBuf {
    static MADE_HERE: AtomicU64 = AtomicU64::new(0);
    let attempt = MADE_HERE.fetch_add(1, Ordering::Relaxed);
    template.with_extension(format!("{}-{attempt}.making", std::process::id()))
}

/// Puts `making`, a data directory just made, in place as `template`, unless a server
/// starting at the same time put its own there first (`made` says whether a directory
/// is a finished one): then that one serves and `making` goes. Renamed whole, so that no
/// server ever copies half of one.
pub(crate) fn put_in_place(making: &Path, template: &Path, made: impl Fn(&Path) -> bool) {
    if std::fs::rename(making, template).is_err() {
        assert!(
            made(template),
            "cannot put the data directory template in place at {}",
            template.display()
        );
        if let Err(err) = std::fs::remove_dir_all(making) {
            eprintln!("lock-testkit: removing {}: {err}", making.display());
        }
    }
}

/// Copies `template` to `target`, keeping owners and modes.
pub(crate) fn copy(template: &Path, target: &Path) {
    let output = Command::new("cp")
        .arg("-a")
        .arg(template)
        .arg(target)
        .output()
        .unwrap_or_else(|e| panic!("run cp: {e}"));
    assert!(
        output.status.success(),
        "copying {} to {} failed: {}",
        template.display(),
        target.display(),
        String::from_utf8_lossy(&output.stderr)
    );
}
