//! Signals to the server processes a test starts (pauses, crashes), and the processes a
//! server started.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use procfs::process::all_processes;

pub use nix::sys::signal::Signal;

/// Sends `signal` to the process `pid`. A process that is gone already needs nothing (a
/// worker killed while paused, before its SIGCONT); any other failure is returned.
///
/// # Errors
///
/// The operating system's refusal (`EPERM`, or `EINVAL` for a process id out of range).
pub fn signal(pid: u32, signal: Signal) -> Result<(), Errno> {
    let pid = i32::try_from(pid).map_err(|_| Errno::EINVAL)?;
    match kill(Pid::from_raw(pid), signal) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(err) => Err(err),
    }
}

/// Sends `sig` to `pid` for a server's pause, resume or crash, reporting a failure on
/// stderr (a process already gone is none): a test helper has nobody to return it to.
pub(crate) fn send(pid: u32, sig: Signal) {
    if let Err(err) = signal(pid, sig) {
        eprintln!("lock-testkit: {sig} to {pid}: {err}");
    }
}

/// The processes whose parent is `parent`.
pub(crate) fn children(parent: u32) -> Vec<u32> {
    let Ok(parent) = i32::try_from(parent) else {
        return Vec::new();
    };
    let Ok(processes) = all_processes() else {
        return Vec::new();
    };
    processes
        .filter_map(|process| {
            let stat = process.ok()?.stat().ok()?;
            (stat.ppid == parent)
                .then(|| u32::try_from(stat.pid).ok())
                .flatten()
        })
        .collect()
}
