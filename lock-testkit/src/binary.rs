//! Finding the `redis-server` executable.

use std::path::{Path, PathBuf};

/// The message shown when no `redis-server` can be found.
pub(crate) const NOT_FOUND: &str = "redis-server not found: install it (Debian/Ubuntu: \
     apt-get install redis-server; macOS: brew install redis) or set REDIS_SERVER_BIN; \
     `cargo xtask test` does this for you";

/// Directories searched after `PATH`.
const FALLBACK_DIRS: [&str; 3] = ["/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"];

/// Locates the `redis-server` executable.
///
/// Looks at `$REDIS_SERVER_BIN` (if set and the file exists), then every directory on
/// `PATH`, then `/usr/bin`, `/usr/local/bin` and `/opt/homebrew/bin`. Returns `None` if
/// none of them has it.
#[must_use]
pub fn redis_server_binary() -> Option<PathBuf> {
    named_by_env("REDIS_SERVER_BIN").or_else(|| on_path_or_in("redis-server", &FALLBACK_DIRS))
}

/// The file the environment variable `var` names, if it is there.
pub(crate) fn named_by_env(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .filter(|path| path.is_file())
}

/// The executable `name` in the first directory on `PATH` that has it, else in the first
/// of `fallback_dirs` that does.
pub(crate) fn on_path_or_in(name: &str, fallback_dirs: &[&str]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(fallback_dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// Locates the executable `name`: in the directory `$dir_var` names, then on `PATH`,
/// then in `fallback_dirs`.
pub(crate) fn find_executable(
    dir_var: &str,
    name: &str,
    fallback_dirs: &[&str],
) -> Option<PathBuf> {
    std::env::var_os(dir_var)
        .map(|dir| PathBuf::from(dir).join(name))
        .filter(|candidate| is_executable(candidate))
        .or_else(|| on_path_or_in(name, fallback_dirs))
}

/// The binary, or a panic with installation instructions.
pub(crate) fn require_binary() -> PathBuf {
    redis_server_binary().unwrap_or_else(|| panic!("{NOT_FOUND}"))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}
