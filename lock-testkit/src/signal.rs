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

/// Returns once every thread of process `pid` has stopped (after a SIGSTOP), or after
/// five seconds. A signal to a process stops its threads one by one as each next leaves
/// the kernel: on a loaded machine a server was seen answering a request sent after its
/// SIGSTOP (about one pause in fifty, beside a dozen other tests).
pub(crate) fn wait_until_stopped(pid: u32) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !all_threads_stopped(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Whether every thread of process `pid` is stopped (state `T` or `t` in its `stat`); a
/// process that is gone counts as stopped.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.filter_map(Result::ok).all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command's closing parenthesis.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T') || rest.starts_with('t'))
        })
    })
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
