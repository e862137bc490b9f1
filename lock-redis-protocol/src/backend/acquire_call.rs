//! What an acquire sends for each kind family: its script, and its keys and arguments in
//! the order that script reads them.
//!
//! The order is a pure function of already rendered text, apart from any I/O, so that
//! unit tests check it against the scripts' own headers (which say what each `KEYS[n]`
//! and `ARGV[n]` is); a swapped pair of arguments would otherwise only show as a wrong
//! answer from the server.

use crate::script::{self, Script};

/// What every acquire script takes, rendered.
#[derive(Debug, Clone, Copy)]
pub(super) struct Common<'a> {
    /// The lock's hash.
    pub(super) lock: &'a str,
    /// The fencing counter.
    pub(super) token: &'a str,
    /// The restart epoch of the lock's node (or slot).
    pub(super) epoch: &'a str,
    /// The owner's grants hash.
    pub(super) grants: &'a str,
    /// The grant's latch.
    pub(super) latch: &'a str,
    /// The lease, in milliseconds.
    pub(super) lease_ms: &'a str,
    /// The owner's field.
    pub(super) owner: &'a str,
    /// `"1"` when the answer carries a fencing token.
    pub(super) fencing: &'a str,
    /// The restart quarantine, in milliseconds (`"0"`: off).
    pub(super) quarantine: &'a str,
    /// The request's id, which is the grant's.
    pub(super) grant: &'a str,
    /// How long the grant's latch lives, in milliseconds.
    pub(super) latch_ms: &'a str,
    /// How long a waiter keeps its place without asking again, in milliseconds (a
    /// fair lock's waiter timeout; a mutex's hand-over lasts that long).
    pub(super) place_ms: &'a str,
    /// Which attempt of its acquisition this is (a hand-over names the attempt it
    /// followed; readers are never handed a lock, and do not send it).
    pub(super) attempt: &'a str,
}

/// What only one family's script takes, rendered; the variant names the family.
#[derive(Debug, Clone, Copy)]
pub(super) enum Particular<'a> {
    /// The mutex: its reservation for starving waiters and its waiting clients.
    Mutex {
        /// The reservation key.
        reservation: &'a str,
        /// The waiting clients' key.
        waiting: &'a str,
        /// The waiting clients' acquisitions' key.
        requests: &'a str,
        /// `"1"` when the caller is a starving waiter.
        starving: &'a str,
        /// How long a reservation lasts, in milliseconds.
        reservation_ms: &'a str,
        /// How long the caller has waited, in milliseconds.
        waited_ms: &'a str,
        /// The caller's client wake id when it waits to be woken alone, else empty.
        wake_id: &'a str,
        /// How long the waiting clients' set outlives a registration, in milliseconds.
        registered_ms: &'a str,
    },
    /// The fair lock: its queue.
    Fair {
        /// The queue, Redisson's waiter scores and our waiters' liveness.
        queue: [&'a str; 3],
        /// `"1"` when the caller joins the queue if the lock is busy.
        joins: &'a str,
        /// Redisson's wait slot, in milliseconds.
        slot: &'a str,
    },
    /// A read hold: the prefix of the owner's hold keys.
    Read {
        /// The prefix of the owner's read-hold keys.
        prefix: &'a str,
    },
    /// The write hold: the prefix of the owner's read-hold keys, which it may not hold,
    /// and the waiting clients (writers wait as a mutex's waiters do).
    Write {
        /// The prefix of the owner's read-hold keys.
        prefix: &'a str,
        /// The waiting clients' key.
        waiting: &'a str,
        /// The waiting clients' acquisitions' key.
        requests: &'a str,
        /// The caller's client wake id when it waits to be woken alone, else empty.
        wake_id: &'a str,
        /// How long the waiting clients' set outlives a registration, in milliseconds.
        registered_ms: &'a str,
    },
}

/// Up to `N` strings, in order, without an allocation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Listed<'a, const N: usize> {
    items: [&'a str; N],
    len: usize,
}

impl<'a, const N: usize> Listed<'a, N> {
    fn of<const M: usize>(items: [&'a str; M]) -> Self {
        const { assert!(M <= N, "more items than room") };
        let mut listed = Self {
            items: [""; N],
            len: M,
        };
        listed.items[..M].copy_from_slice(&items);
        listed
    }

    /// The strings, in order.
    pub(super) fn as_slice(&self) -> &[&'a str] {
        &self.items[..self.len]
    }
}

/// One acquire's script, keys and arguments.
#[derive(Debug, Clone, Copy)]
pub(super) struct AcquireCall<'a> {
    pub(super) script: &'static Script,
    pub(super) keys: Listed<'a, 8>,
    pub(super) args: Listed<'a, 13>,
}

/// The call an acquire makes: every script ends its keys with the grants hash and the
/// latch, and its arguments with the grant's id and the latch's lifetime, which the
/// prelude's grant helpers read from the end.
pub(super) fn acquire_call<'a>(
    common: &Common<'a>,
    particular: &Particular<'a>,
) -> AcquireCall<'a> {
    let Common {
        lock,
        token,
        epoch,
        grants,
        latch,
        lease_ms,
        owner,
        fencing,
        quarantine,
        grant,
        latch_ms,
        place_ms,
        attempt,
    } = *common;
    match *particular {
        Particular::Mutex {
            reservation,
            waiting,
            requests,
            starving,
            reservation_ms,
            waited_ms,
            wake_id,
            registered_ms,
        } => AcquireCall {
            script: &script::MUTEX_ACQUIRE,
            keys: Listed::of([
                lock,
                reservation,
                token,
                epoch,
                waiting,
                requests,
                grants,
                latch,
            ]),
            args: Listed::of([
                lease_ms,
                owner,
                starving,
                reservation_ms,
                waited_ms,
                fencing,
                quarantine,
                wake_id,
                registered_ms,
                place_ms,
                attempt,
                grant,
                latch_ms,
            ]),
        },
        Particular::Fair {
            queue: [queue, deadlines, alive],
            joins,
            slot,
        } => AcquireCall {
            script: &script::FAIR_ACQUIRE,
            keys: Listed::of([lock, queue, deadlines, alive, token, epoch, grants, latch]),
            args: Listed::of([
                lease_ms, owner, joins, place_ms, fencing, quarantine, slot, attempt, grant,
                latch_ms,
            ]),
        },
        Particular::Read { prefix } => AcquireCall {
            script: &script::RW_READ_ACQUIRE,
            keys: Listed::of([lock, token, epoch, grants, latch]),
            args: Listed::of([
                lease_ms, owner, prefix, fencing, quarantine, grant, latch_ms,
            ]),
        },
        Particular::Write {
            prefix,
            waiting,
            requests,
            wake_id,
            registered_ms,
        } => AcquireCall {
            script: &script::RW_WRITE_ACQUIRE,
            keys: Listed::of([lock, token, epoch, waiting, requests, grants, latch]),
            args: Listed::of([
                lease_ms,
                owner,
                fencing,
                quarantine,
                prefix,
                wake_id,
                registered_ms,
                place_ms,
                attempt,
                grant,
                latch_ms,
            ]),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every input, rendered as the name of its role, so that a call shows which role
    /// sits at each position.
    const COMMON: Common<'static> = Common {
        lock: "lock",
        token: "token",
        epoch: "epoch",
        grants: "grants",
        latch: "latch",
        lease_ms: "lease_ms",
        owner: "owner",
        fencing: "fencing",
        quarantine: "quarantine",
        grant: "grant",
        latch_ms: "latch_ms",
        place_ms: "place_ms",
        attempt: "attempt",
    };

    fn every_family() -> [Particular<'static>; 4] {
        [
            Particular::Mutex {
                reservation: "reservation",
                waiting: "waiting",
                requests: "requests",
                starving: "starving",
                reservation_ms: "reservation_ms",
                waited_ms: "waited_ms",
                wake_id: "wake_id",
                registered_ms: "registered_ms",
            },
            Particular::Fair {
                queue: ["queue", "deadlines", "alive"],
                joins: "joins",
                slot: "slot",
            },
            Particular::Read { prefix: "prefix" },
            Particular::Write {
                prefix: "prefix",
                waiting: "waiting",
                requests: "requests",
                wake_id: "wake_id",
                registered_ms: "registered_ms",
            },
        ]
    }

    /// Whether a script header's description of one key or argument describes `role`.
    /// Each role has words no other role's description has; the owner alone is told by
    /// its first word, as other descriptions speak of "the owner's" keys.
    fn describes(role: &str, description: &str) -> bool {
        let words: &[&str] = match role {
            "lock" => &["lock hash"],
            "token" => &["fencing counter"],
            "epoch" => &["restart epoch"],
            "grants" => &["grants hash"],
            "latch" => &["grant latch."],
            "reservation" => &["reservation string"],
            "waiting" => &["waiting clients (see"],
            "requests" => &["waiting clients' acquisitions"],
            "queue" => &["waiter queue"],
            "deadlines" => &["waiter scores"],
            "alive" => &["liveness"],
            "lease_ms" => &["lease (ms)"],
            "owner" => return description.split([' ', ';']).next() == Some("owner"),
            "fencing" => &["fencing token"],
            "quarantine" => &["quarantine"],
            "grant" => &["request's id"],
            "latch_ms" => &["latch lifetime"],
            "starving" => &["starving"],
            "reservation_ms" => &["reservation lasts"],
            "waited_ms" => &["has waited"],
            "wake_id" => &["wake id"],
            "registered_ms" => &["outlives a registration"],
            "place_ms" => &["keeps its place", "waiter timeout"],
            "attempt" => &["which attempt"],
            "joins" => &["join the queue"],
            "slot" => &["wait slot"],
            "prefix" => &["prefix"],
            other => panic!("no description words for the role {other}"),
        };
        words.iter().any(|w| description.contains(w))
    }

    /// The descriptions of `KEYS[n]` (or `ARGV[n]`) in a script's header, by `n - 1`.
    fn header(source: &str, array: &str) -> Vec<String> {
        let header: String = source
            .lines()
            .take_while(|line| line.starts_with("--"))
            .flat_map(|line| line.trim_start_matches("--").split_whitespace())
            .collect::<Vec<_>>()
            .join(" ");
        let mut descriptions = Vec::new();
        let mut rest = header.as_str();
        while let Some(at) = rest.find(&format!("{array}[")) {
            let after = &rest[at + array.len() + 1..];
            let (number, text) = after.split_once(']').expect("a closed index");
            let number: usize = number.parse().expect("a numeric index");
            assert_eq!(number, descriptions.len() + 1, "{array} described in order");
            // A description ends where the next key or argument, or the reply, begins.
            let end = [
                "KEYS[",
                "ARGV[",
                "Reply:",
                "Readers share",
                "The expiry",
                "Deadlines",
            ]
            .iter()
            .filter_map(|next| text.find(next))
            .min()
            .unwrap_or(text.len());
            descriptions.push(text[..end].trim().to_owned());
            rest = &text[end..];
        }
        descriptions
    }

    #[test]
    fn every_key_and_argument_sits_where_its_script_reads_it() {
        for particular in every_family() {
            let call = acquire_call(&COMMON, &particular);
            let source = call.script.body();
            for (array, sent) in [
                ("KEYS", call.keys.as_slice()),
                ("ARGV", call.args.as_slice()),
            ] {
                let described = header(source, array);
                assert_eq!(
                    described.len(),
                    sent.len(),
                    "{}: {array} described {described:?}, sent {sent:?}",
                    call.script.name()
                );
                for (n, (role, description)) in sent.iter().zip(&described).enumerate() {
                    let claimed: Vec<&str> = sent
                        .iter()
                        .copied()
                        .filter(|other| describes(other, description))
                        .collect();
                    assert_eq!(
                        claimed,
                        [*role],
                        "{}: {array}[{}] is {description:?}; sent {role}",
                        call.script.name(),
                        n + 1
                    );
                }
            }
        }
    }

    #[test]
    fn every_script_reads_no_key_or_argument_past_those_sent() {
        for particular in every_family() {
            let call = acquire_call(&COMMON, &particular);
            let body = call.script.body();
            for (array, sent) in [
                ("KEYS", call.keys.as_slice().len()),
                ("ARGV", call.args.as_slice().len()),
            ] {
                let highest = body
                    .match_indices(&format!("{array}["))
                    .filter_map(|(at, _)| {
                        let after = &body[at + array.len() + 1..];
                        after.split_once(']')?.0.parse::<usize>().ok()
                    })
                    .max()
                    .unwrap_or(0);
                assert_eq!(highest, sent, "{}: {array}", call.script.name());
            }
        }
    }

    #[test]
    fn the_grant_helpers_find_their_inputs_at_the_end() {
        for particular in every_family() {
            let call = acquire_call(&COMMON, &particular);
            assert!(call.keys.as_slice().ends_with(&["grants", "latch"]));
            assert!(call.args.as_slice().ends_with(&["grant", "latch_ms"]));
            assert_eq!(call.keys.as_slice()[0], "lock");
            assert_eq!(call.args.as_slice()[..2], ["lease_ms", "owner"]);
        }
    }

    #[test]
    fn each_family_runs_its_own_script() {
        for particular in every_family() {
            let script = acquire_call(&COMMON, &particular).script;
            let expected = match particular {
                Particular::Mutex { .. } => &script::MUTEX_ACQUIRE,
                Particular::Fair { .. } => &script::FAIR_ACQUIRE,
                Particular::Read { .. } => &script::RW_READ_ACQUIRE,
                Particular::Write { .. } => &script::RW_WRITE_ACQUIRE,
            };
            assert!(std::ptr::eq(script, expected), "{}", script.name());
        }
    }
}
