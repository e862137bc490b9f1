//! The fenced store: a separate process that workers report every critical section to,
//! timestamped on one monotonic clock (this process's), and that accepts a write for a
//! name only with a fencing token at least as large as the last one it accepted.
//!
//! Line protocol (one command per line, fields separated by spaces):
//!
//! | command | meaning | reply |
//! |---|---|---|
//! | `ENTER name worker token mode` | a worker took the lock (`mode` r or w), or a permit of a semaphore of P (`mode` sP) | none |
//! | `VALID name worker` | sent right *before* the worker checks `is_held()` | none |
//! | `WRITE name worker token` | the check said held: write with the token | `OK` or `STALE` |
//! | `READ name worker` | the check said held (a reader): read | `OK` |
//! | `LOST name worker` | the check said not held: the write is skipped | none |
//! | `LEAVE name worker` | the worker released | none |
//! | `WAIT name worker ms` | the acquisition that just entered waited `ms` | none |
//! | `DEAD worker` | (from the runner) the worker was killed | none |
//! | `FAULT kind` | (from the runner) a fault begins, for the report's examples | none |
//! | `OUTAGE ms` | (from the runner) the servers were out of reach for the last `ms` (a failover's promotion, a restart): no waiter counts as stuck then | none |
//! | `FORCING name` | (from the runner) an operator's force-unlock of the name begins | `OK` |
//! | `FORCED name ms` | (from the runner) it ended: every section open at any time since it began may have been revoked (the deletion ran somewhere in between), and must learn it within `ms` of the force-unlock's start | none |
//! | `UNFORCED name` | (from the runner) it ended and found nothing of its side held (a read-write lock's readers, when it deleted the writer's side): nobody was revoked | none |
//! | `REPORT` | the analysis so far | one JSON line |

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use crate::analysis::{Section, over_capacity_valid, overlapping_pairs, stuck_waiters};

#[derive(Debug, Default)]
struct Name {
    sections: Vec<Section>,
    /// Index in `sections` of each worker's open section.
    open: HashMap<String, usize>,
    last_token: Option<u64>,
    /// The latest `enter` among sections whose write was accepted.
    newest_writer_enter: Option<u64>,
    waits: Vec<(u64, u64)>,
    /// The force-unlock under way: when it began, and the sections it may revoke so
    /// far (those open then; those that entered since are the ones from the index).
    forcing: Option<Forcing>,
}

/// A force-unlock under way (see [`Name::forcing`]).
#[derive(Debug)]
struct Forcing {
    began: u64,
    open_then: Vec<usize>,
    entered_from: usize,
}

#[derive(Debug, Default)]
struct State {
    names: HashMap<String, Name>,
    writes_accepted: u64,
    writes_rejected: u64,
    stale_writes_accepted: u64,
    lost_reported: u64,
    forced: u64,
    /// The faults injected so far, when each began (µs on the store's clock).
    faults: Vec<(u64, String)>,
    /// When the servers were out of reach (µs on the store's clock).
    outages: Vec<(u64, u64)>,
}

impl State {
    fn close_open(name: &mut Name, worker: &str, now: u64) {
        if let Some(index) = name.open.remove(worker) {
            name.sections[index].leave = Some(now);
        }
    }

    /// A force-unlock of `name` ended (see `FORCED`): its holders must learn it within
    /// `ms` of its start.
    fn force_ended(&mut self, name: &str, ms: u64, now: u64) {
        let entry = self.names.entry(name.to_owned()).or_default();
        let forcing = entry.forcing.take();
        let began = forcing.as_ref().map_or(now, |f| f.began);
        let learn_by = began + ms * 1000;
        // The deletion ran at some moment between its start and now: any section
        // open in between may be the one it revoked, also one that left before
        // the operator heard back (its holder learns at its next renewal, or not
        // at all when it releases first, and a section entering after the
        // deletion overlaps it by design). The first revocation counts: a
        // section revoked twice was revoked (and overlapped by design) from the
        // first.
        let mut revoked: Vec<usize> = entry.open.values().copied().collect();
        if let Some(forcing) = forcing {
            revoked.extend(forcing.open_then);
            revoked.extend(forcing.entered_from..entry.sections.len());
        }
        for index in revoked {
            entry.sections[index]
                .revoked
                .get_or_insert((began, learn_by));
        }
        self.forced += 1;
    }

    /// Applies one command; returns the reply, if the command has one.
    fn apply(&mut self, line: &str, now: u64) -> Option<String> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["ENTER", name, worker, _token, mode] => {
                let entry = self.names.entry((*name).to_owned()).or_default();
                Self::close_open(entry, worker, now);
                entry.sections.push(Section {
                    worker: (*worker).to_owned(),
                    write_mode: *mode == "w",
                    capacity: mode.strip_prefix('s').and_then(|p| p.parse().ok()),
                    enter: now,
                    checking: None,
                    valid: None,
                    leave: None,
                    revoked: None,
                });
                let index = entry.sections.len() - 1;
                entry.open.insert((*worker).to_owned(), index);
                None
            }
            ["VALID", name, worker] => {
                let entry = self.names.entry((*name).to_owned()).or_default();
                if let Some(&index) = entry.open.get(*worker) {
                    entry.sections[index].checking = Some(now);
                }
                None
            }
            ["LOST", _name, _worker] => {
                self.lost_reported += 1;
                None
            }
            ["WRITE", name, worker, token] => Some(self.write(name, worker, token)),
            ["READ", name, worker] => {
                let entry = self.names.entry((*name).to_owned()).or_default();
                if let Some(&index) = entry.open.get(*worker) {
                    let section = &mut entry.sections[index];
                    section.valid = section.checking;
                }
                Some("OK".to_owned())
            }
            ["LEAVE", name, worker] => {
                let entry = self.names.entry((*name).to_owned()).or_default();
                Self::close_open(entry, worker, now);
                None
            }
            ["WAIT", name, _worker, ms] => {
                let waited = ms.parse::<u64>().unwrap_or(0) * 1000;
                let entry = self.names.entry((*name).to_owned()).or_default();
                entry.waits.push((now.saturating_sub(waited), now));
                None
            }
            ["FORCING", name] => {
                let entry = self.names.entry((*name).to_owned()).or_default();
                entry.forcing = Some(Forcing {
                    began: now,
                    open_then: entry.open.values().copied().collect(),
                    entered_from: entry.sections.len(),
                });
                // Answered, so that the force-unlock is sent only once its start is
                // recorded: a section it lets in must not enter "before" it began.
                Some("OK".to_owned())
            }
            ["FORCED", name, ms] => {
                self.force_ended(name, ms.parse::<u64>().unwrap_or(0), now);
                None
            }
            ["UNFORCED", name] => {
                self.names.entry((*name).to_owned()).or_default().forcing = None;
                None
            }
            ["FAULT", fault] => {
                self.faults.push((now, (*fault).to_owned()));
                None
            }
            ["OUTAGE", ms] => match ms.parse::<u64>() {
                Ok(ms) => {
                    self.outages
                        .push((now.saturating_sub(ms.saturating_mul(1000)), now));
                    None
                }
                Err(_) => Some(format!("ERR outage {ms:?}")),
            },
            ["DEAD", worker] => {
                for entry in self.names.values_mut() {
                    Self::close_open(entry, worker, now);
                }
                None
            }
            _ => Some(format!("ERR unknown command {line:?}")),
        }
    }

    fn write(&mut self, name: &str, worker: &str, token: &str) -> String {
        let Ok(token) = token.parse::<u64>() else {
            return "ERR token".to_owned();
        };
        let entry = self.names.entry(name.to_owned()).or_default();
        // The check before this write said held: the section was valid from its entry
        // until the check began.
        if let Some(&index) = entry.open.get(worker) {
            let section = &mut entry.sections[index];
            section.valid = section.checking;
        }
        if entry.last_token.is_some_and(|last| token < last) {
            self.writes_rejected += 1;
            return "STALE".to_owned();
        }
        entry.last_token = Some(token);
        self.writes_accepted += 1;
        // Accepted out of order: a section that entered later already wrote.
        if let Some(&index) = entry.open.get(worker) {
            let enter = entry.sections[index].enter;
            if entry
                .newest_writer_enter
                .is_some_and(|newest| newest > enter)
            {
                self.stale_writes_accepted += 1;
            }
            entry.newest_writer_enter = Some(entry.newest_writer_enter.unwrap_or(0).max(enter));
        }
        "OK".to_owned()
    }

    fn report(&self, now: u64, stuck_after: u64) -> String {
        let mut overlaps = 0u64;
        let mut stuck = 0u64;
        let mut sections = 0u64;
        let mut over_capacity = 0u64;
        let mut revoked_not_learnt = 0u64;
        let mut overlap_examples = Vec::new();
        let mut revoked_examples = Vec::new();
        let mut stuck_examples = Vec::new();
        for (key, name) in &self.names {
            sections += name.sections.len() as u64;
            let pairs = overlapping_pairs(&name.sections);
            overlaps += pairs.len() as u64;
            overlap_examples.extend(pairs.into_iter().take(3).map(|p| format!("{key}: {p}")));
            let unlearnt: Vec<&Section> = name
                .sections
                .iter()
                // Only a section open when the force-unlock began was surely revoked: one
                // that entered while the operator's request was on its way (retried
                // through the faults, seconds at times) may have been granted after the
                // deletion. Either kind is excused its overlaps (`overlapping_pairs`).
                .filter(|s| {
                    matches!((s.revoked, s.valid), (Some((began, by)), Some(v)) if v > by && s.enter < began)
                })
                .collect();
            revoked_not_learnt += unlearnt.len() as u64;
            revoked_examples.extend(unlearnt.iter().take(3).map(|s| {
                let (began, by) = s.revoked.unwrap_or_default();
                format!(
                    "{key}: {} ({}) entered {} ms, force-unlock began {} ms, to learn by {} ms, \
                     still held at {} ms",
                    s.worker,
                    if s.write_mode { "writer" } else { "reader" },
                    s.enter / 1000,
                    began / 1000,
                    by / 1000,
                    s.valid.unwrap_or_default() / 1000
                )
            }));
            over_capacity += over_capacity_valid(&name.sections);
            let gaps = stuck_waiters(
                &name.sections,
                &name.waits,
                (now, &self.outages),
                stuck_after,
            );
            stuck += gaps.len() as u64;
            stuck_examples.extend(gaps.into_iter().take(3).map(|(from, to)| {
                format!(
                    "{key}: free {} ms to {} ms; faults from 2 s before: {:?}",
                    from / 1000,
                    to / 1000,
                    self.faults_between(from.saturating_sub(2_000_000), to)
                )
            }));
        }
        let report = StoreReport {
            sections,
            writes_accepted: self.writes_accepted,
            writes_rejected: self.writes_rejected,
            overlaps_both_valid: overlaps,
            stale_writes_accepted: self.stale_writes_accepted,
            lost_reported: self.lost_reported,
            stuck_waiters: stuck,
            over_capacity,
            forced: self.forced,
            revoked_not_learnt,
            overlap_examples,
            revoked_examples,
            stuck_examples,
        };
        serde_json::to_string(&report).unwrap_or_default()
    }

    /// The faults that began between `from` and `to`, each with its time in ms.
    fn faults_between(&self, from: u64, to: u64) -> Vec<String> {
        self.faults
            .iter()
            .filter(|(at, _)| (from..=to).contains(at))
            .map(|(at, fault)| format!("{} ms {fault}", at / 1000))
            .collect()
    }
}

/// The store's analysis: what it counted, and the four invariants, each of which must
/// be 0.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StoreReport {
    /// Critical sections entered.
    pub(crate) sections: u64,
    pub(crate) writes_accepted: u64,
    pub(crate) writes_rejected: u64,
    /// Two workers held one name and both guards said `is_held()`.
    pub(crate) overlaps_both_valid: u64,
    /// The store accepted a write out of token order.
    pub(crate) stale_writes_accepted: u64,
    /// Sections whose check said the hold was lost (not a failure).
    pub(crate) lost_reported: u64,
    /// A waiter sat through a long free period without being served.
    pub(crate) stuck_waiters: u64,
    /// More valid permit holders at once than permits.
    pub(crate) over_capacity: u64,
    /// Force-unlocks an operator made (not a failure).
    #[serde(default)]
    pub(crate) forced: u64,
    /// A section a force-unlock revoked whose check still said held after the lease
    /// it had to learn it within.
    #[serde(default)]
    pub(crate) revoked_not_learnt: u64,
    /// The first overlapping pairs of each name, for the post-mortem (times in µs on
    /// the store's clock).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) overlap_examples: Vec<String>,
    /// Up to three revoked sections per name that did not learn it in time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) revoked_examples: Vec<String>,
    /// The free periods stuck waiters sat through, with the faults around them (times in
    /// ms on the store's clock).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) stuck_examples: Vec<String>,
}

impl StoreReport {
    pub(crate) fn invariants_hold(&self) -> bool {
        self.overlaps_both_valid == 0
            && self.stale_writes_accepted == 0
            && self.stuck_waiters == 0
            && self.over_capacity == 0
            && self.revoked_not_learnt == 0
    }
}

/// Serves the store on `listen`, printing `PORT <port>` first; `stuck_after` is the
/// longest free period a waiter may sit through.
pub(crate) async fn serve(listen: &str, stuck_after: Duration) -> Result<(), String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("store: cannot listen on {listen}: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    println!("PORT {port}");
    let started = Instant::now();
    let state = Arc::new(Mutex::new(State::default()));
    let stuck_after = stuck_after.as_micros() as u64;
    loop {
        let (socket, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let _ = session(socket, &state, started, stuck_after).await;
        });
    }
}

async fn session(
    socket: TcpStream,
    state: &Mutex<State>,
    started: Instant,
    stuck_after: u64,
) -> std::io::Result<()> {
    let _ = socket.set_nodelay(true);
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Some(line) = lines.next_line().await? {
        let now = started.elapsed().as_micros() as u64;
        let reply = {
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            if line.trim() == "REPORT" {
                Some(state.report(now, stuck_after))
            } else {
                state.apply(&line, now)
            }
        };
        if let Some(reply) = reply {
            write.write_all(reply.as_bytes()).await?;
            write.write_all(b"\n").await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
