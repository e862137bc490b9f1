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
    if let Some(path) = std::env::var_os("REDIS_SERVER_BIN").map(PathBuf::from)
        && path.is_file()
    {
        return Some(path);
    }
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .iter()
        .map(PathBuf::as_path)
        .chain(FALLBACK_DIRS.iter().map(Path::new))
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| is_executable(candidate))
}

/// Locates the executable `name`: in the directory `$dir_var` names, then on `PATH`,
/// then in `fallback_dirs`.
pub(crate) fn find_executable(
    dir_var: &str,
    name: &str,
    fallback_dirs: &[&str],
) -> Option<PathBuf> {
    let from_var = std::env::var_os(dir_var).map(PathBuf::from);
    let on_path = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    from_var
        .into_iter()
        .chain(on_path)
        .chain(fallback_dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
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
