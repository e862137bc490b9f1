//! A private temporary directory per server (tempfile's), removed on drop, and where
//! those directories and the data-directory templates live.

use std::path::PathBuf;
use std::sync::OnceLock;

/// A directory under [`base`] that belongs to one server.
pub(crate) type ScratchDir = tempfile::TempDir;

/// Overrides where servers keep their files (a directory).
const BASE_VARIABLE: &str = "LOCK_TESTKIT_DIR";

/// The free space a memory-backed file system must have to be used (bytes): a test run
/// keeps about a dozen servers' data at once, a PostgreSQL one 40 MB to 100 MB.
const TMPFS_ROOM: u64 = 2 << 30;

/// Where servers keep their files: `$LOCK_TESTKIT_DIR` when set; else `/dev/shm` when it
/// is a writable memory-backed directory with room to spare; else the system temp dir.
///
/// Every server copies a data directory when it starts and removes it when it stops: on
/// a disk's file system that costs a few hundred milliseconds of the kernel's time per
/// PostgreSQL server (40 MB), in memory a fifth of that, and a test run starts hundreds.
pub(crate) fn base() -> PathBuf {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| {
        if let Some(dir) = std::env::var_os(BASE_VARIABLE) {
            return PathBuf::from(dir);
        }
        let shm = PathBuf::from("/dev/shm");
        if roomy(&shm) {
            return shm;
        }
        std::env::temp_dir()
    })
    .clone()
}

/// Whether `dir` is a writable directory with [`TMPFS_ROOM`] free.
fn roomy(dir: &std::path::Path) -> bool {
    let Ok(stats) = nix::sys::statvfs::statvfs(dir) else {
        return false;
    };
    let free = stats
        .blocks_available()
        .saturating_mul(stats.fragment_size());
    free >= TMPFS_ROOM && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// A new scratch directory.
///
/// # Panics
///
/// When the base directory cannot take one: no server could start either.
pub(crate) fn scratch_dir() -> ScratchDir {
    tempfile::Builder::new()
        .prefix("lock-testkit-")
        .tempdir_in(base())
        .unwrap_or_else(|err| panic!("cannot create a directory in {}: {err}", base().display()))
}
