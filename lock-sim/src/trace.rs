//! What happened in a run, for its replay: every event with its simulated time, folded
//! into a digest (two runs of a seed must give the same one), the latest kept to print.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use tokio::time::Instant;

/// How many of the latest events a failure prints.
const KEPT: usize = 60;

/// The events of one run.
#[derive(Debug)]
pub(crate) struct Trace {
    started: Instant,
    echo: bool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    latest: VecDeque<String>,
    digest: u64,
    events: u64,
}

impl Trace {
    /// A trace starting now; with `echo`, every event is printed as it happens.
    pub(crate) fn new(echo: bool) -> Self {
        Self {
            started: Instant::now(),
            echo,
            state: Mutex::new(State {
                digest: 0xcbf2_9ce4_8422_2325,
                ..State::default()
            }),
        }
    }

    /// Records `event` at the current simulated time.
    pub(crate) fn note(&self, event: &str) {
        let at = self.started.elapsed();
        let line = format!("{:>9.3} ms  {event}", at.as_secs_f64() * 1000.0);
        if self.echo {
            println!("{line}");
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // FNV-1a over every event, in order.
        for byte in line.bytes() {
            state.digest = (state.digest ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        state.events += 1;
        if state.latest.len() == KEPT {
            state.latest.pop_front();
        }
        state.latest.push_back(line);
    }

    /// The digest of every event so far, and how many there were.
    pub(crate) fn digest(&self) -> (u64, u64) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (state.digest, state.events)
    }

    /// The latest events, oldest first.
    pub(crate) fn latest(&self) -> Vec<String> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.latest.iter().cloned().collect()
    }
}
