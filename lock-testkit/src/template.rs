//! Data directories made once per installation and copied for each server: making one
//! (`initdb`, `mariadb-install-db`) takes seconds of CPU, a copy milliseconds, and a test
//! run starts hundreds of servers.

use std::path::Path;
use std::process::Command;

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
