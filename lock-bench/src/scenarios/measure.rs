//! What a scenario reads off the client and the server: CPU time, reads, and the
//! server's time in commands (`INFO commandstats`).

use std::collections::BTreeMap;

use lock_testkit::{CommandStats, RedisServer};

use super::{Figures, figures};

/// How many times redis-server has read from its clients' sockets (`INFO stats`): the
/// fewer reads per pair, the more commands each read brought (the server's cost per
/// command falls with it).
pub(crate) async fn server_reads(server: &RedisServer) -> f64 {
    let info: String = server.command(&["INFO", "stats"]).await;
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// CPU time redis-server has used (user + system), from `INFO cpu`.
pub(crate) async fn server_cpu_seconds(server: &RedisServer) -> f64 {
    let info: String = server.command(&["INFO", "cpu"]).await;
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

/// The server's time for a contender's rounds, from `INFO commandstats`: a hand-off's
/// floor is mostly the server's, and a script's time per call on a server that idles
/// between rounds is about three times its time under a steady load (stop 14's runs).
///
/// A command a script calls is counted twice there: in the script's own time, and on its
/// own line. So the time of a contender that sends scripts alone is its scripts' time
/// (`script_us`); the sum over every line (`total_us`) counts what its scripts call
/// twice, and is only a rough figure where a contender also sends plain commands.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ServerTime {
    /// Microseconds of every command but `INFO` (the reading's own), each line once.
    pub(crate) total_us: f64,
    /// Microseconds and calls of `EVAL`, `EVALSHA` and `FCALL`: each call's whole run,
    /// the commands it called included.
    pub(crate) script_us: f64,
    script_calls: f64,
}

impl ServerTime {
    /// The server's totals so far.
    pub(crate) async fn read(server: &RedisServer) -> Self {
        Self::from_stats(&server.command_stats().await)
    }

    /// The totals in the server's figures per command.
    fn from_stats(stats: &BTreeMap<String, CommandStats>) -> Self {
        let mut time = Self::default();
        for (command, stats) in stats {
            if command != "info" {
                time.total_us += stats.usec;
            }
            if matches!(command.as_str(), "eval" | "evalsha" | "fcall") {
                time.script_us += stats.usec;
                time.script_calls += stats.calls as f64;
            }
        }
        time
    }

    /// Adds what the server spent between two readings.
    pub(crate) fn add(&mut self, before: Self, after: Self) {
        self.total_us += after.total_us - before.total_us;
        self.script_us += after.script_us - before.script_us;
        self.script_calls += after.script_calls - before.script_calls;
    }

    /// Server microseconds per round, and per script call.
    pub(crate) fn figures(&self, rounds: f64) -> Figures {
        figures(&[
            ("server_us_per_round", self.total_us / rounds),
            (
                "script_server_us_per_call",
                self.script_us / self.script_calls,
            ),
        ])
    }
}

/// CPU time of this process (user + system), in seconds; 0 where it cannot be read.
pub(crate) fn cpu_seconds() -> f64 {
    let ticks = procfs::process::Process::myself()
        .and_then(|me| me.stat())
        .map_or(0, |stat| stat.utime + stat.stime);
    ticks as f64 / procfs::ticks_per_second() as f64
}

/// CPU time of the process `pid` (user + system), in seconds; 0 where it cannot be read.
pub(crate) fn cpu_seconds_of(pid: u32) -> f64 {
    let ticks = i32::try_from(pid)
        .ok()
        .and_then(|pid| procfs::process::Process::new(pid).ok())
        .and_then(|process| process.stat().ok())
        .map_or(0, |stat| stat.utime + stat.stime);
    ticks as f64 / procfs::ticks_per_second() as f64
}

/// Script calls the server ran, in either form (scripts or functions).
pub(crate) async fn script_calls(server: &RedisServer) -> u64 {
    let stats = server.command_stats().await;
    ["evalsha", "eval", "fcall"]
        .iter()
        .filter_map(|command| stats.get(*command))
        .map(|stats| stats.calls)
        .sum()
}

#[cfg(test)]
mod tests {
    use lock_testkit::parse_command_stats;

    use super::ServerTime;

    fn equal(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn this_process_cpu_time_grows_with_its_work() {
        // Spins until 50 ms of CPU time are counted, or 20 s of wall time pass (a loaded
        // machine gives the spinning thread less than its wall time, never nothing).
        let before = super::cpu_seconds();
        let started = std::time::Instant::now();
        let mut spun = 0u64;
        while super::cpu_seconds() - before < 0.05 {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(20),
                "20 s of spinning counted no CPU time"
            );
            for _ in 0..100_000 {
                spun = std::hint::black_box(spun.wrapping_add(1));
            }
        }
    }

    #[test]
    fn server_time_sums_every_command_but_info_and_counts_scripts_apart() {
        // The `set` line stands for a command the scripts called: counted in `total_us`
        // beside them, never in `script_us`.
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=4,usec=100,usec_per_call=25.00,rejected_calls=0,failed_calls=1\r\n\
            cmdstat_info:calls=9,usec=900,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_set:calls=2,usec=6,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_eval:calls=1,usec=30,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n";
        let time = ServerTime::from_stats(&parse_command_stats(info));
        assert!(
            equal(time.total_us, 136.0),
            "time.total_us = {}",
            time.total_us
        );
        assert!(
            equal(time.script_us, 130.0),
            "time.script_us = {}",
            time.script_us
        );
        assert!(
            equal(time.script_calls, 5.0),
            "time.script_calls = {}",
            time.script_calls
        );
        let mut sum = ServerTime::default();
        sum.add(ServerTime::default(), time);
        sum.add(
            time,
            ServerTime::from_stats(&parse_command_stats(
                &info.replace("usec=100,", "usec=150,"),
            )),
        );
        assert!(
            equal(sum.script_us, 180.0),
            "sum.script_us = {}",
            sum.script_us
        );
        assert!(
            equal(sum.figures(2.0)["server_us_per_round"], 93.0),
            "sum.figures(2.0)[server_us_per_round] = {}",
            sum.figures(2.0)["server_us_per_round"]
        );
    }
}
