//! A private temporary directory per server (tempfile's), removed on drop.

/// A directory under the system temp dir that belongs to one server.
pub(crate) type ScratchDir = tempfile::TempDir;

/// A new scratch directory.
///
/// # Panics
///
/// When the temp dir cannot take one: no server could start either.
pub(crate) fn scratch_dir() -> ScratchDir {
    tempfile::Builder::new()
        .prefix("lock-testkit-")
        .tempdir()
        .unwrap_or_else(|err| panic!("cannot create a temp dir: {err}"))
}
