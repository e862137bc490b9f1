//! The prelude: Lua helpers shared by the scripts. Each script carries only the helpers
//! it calls, directly or through one another.
//!
//! Lua makes a closure of every `local function` each time a script runs, so a script
//! that carried the whole prelude (27 helpers) paid for all of them on every call:
//! 0.85 us of the server's time per call, measured with `EVALSHA` of the prelude and
//! `return 1`, against 0.5 us for the script `return 1` alone.

/// Every helper, each a `local function` with the comments above it: the files of
/// `scripts/prelude/`, one concern each, in an order where a helper comes after every
/// helper it calls.
pub(super) const PRELUDE: &str = concat!(
    // The server's clock, fencing tokens, the restart quarantine.
    include_str!("../scripts/prelude/time.lua"),
    // The fair lock's queue, in Redisson's layout.
    include_str!("../scripts/prelude/queue.lua"),
    // Reading a lock: whether it exists, its lease, a reader's holds.
    include_str!("../scripts/prelude/reads.lua"),
    // Grants: recording them, finding them again, ending them.
    include_str!("../scripts/prelude/grants.lua"),
    // Waiting clients: their channels, their registration, the offer to other libraries.
    include_str!("../scripts/prelude/waiting.lua"),
    // Hand-over on release: to the waiting acquisition, else a wake-up.
    include_str!("../scripts/prelude/handover.lua"),
    // The permits of both semaphores: expired ones reclaimed, reservations.
    include_str!("../scripts/prelude/permits.lua"),
    // Latches, and the kind marker a semaphore and a latch sharing a name need.
    include_str!("../scripts/prelude/latch.lua"),
);

/// `body` after the prelude's helpers it calls, directly or through one another, in the
/// prelude's order (a helper is defined before the helpers that call it).
pub(super) fn with_helpers(body: &str) -> String {
    let helpers = helpers(PRELUDE);
    let mut needed = vec![false; helpers.len()];
    let mut unread = vec![body];
    while let Some(text) = unread.pop() {
        let code = without_comment_lines(text);
        for (helper, needed) in helpers.iter().zip(needed.iter_mut()) {
            if !*needed && names(&code, helper.name) {
                *needed = true;
                unread.push(helper.text);
            }
        }
    }
    let mut source = String::with_capacity(PRELUDE.len() + body.len());
    for (helper, needed) in helpers.iter().zip(needed) {
        if needed {
            source.push_str(helper.text);
        }
    }
    source.push_str(body);
    source
}

/// One helper of the prelude.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Helper<'a> {
    name: &'a str,
    /// From the line after the previous helper's `end` to its own `end` line: its
    /// comments, its definition, and the blank lines between.
    text: &'a str,
}

/// Splits the prelude into its helpers. A helper ends with a line that is `end` alone at
/// the start of the line (code inside a helper is indented).
fn helpers(prelude: &str) -> Vec<Helper<'_>> {
    let mut helpers = Vec::new();
    let (mut start, mut end) = (0, 0);
    for line in prelude.split_inclusive('\n') {
        end += line.len();
        if line.trim_end() != "end" {
            continue;
        }
        let text = &prelude[start..end];
        let name = text
            .lines()
            .find_map(|line| line.strip_prefix("local function "))
            .and_then(|rest| rest.split('(').next());
        if let Some(name) = name {
            helpers.push(Helper { name, text });
        }
        start = end;
    }
    helpers
}

/// `text` without its comment lines (those that start with `--`), which name helpers
/// they do not call. A comment after code on its line stays: at worst it carries a
/// helper that is not needed.
fn without_comment_lines(text: &str) -> String {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `text` names `name` as a whole identifier: called, or passed on (as to
/// `pcall`).
fn names(text: &str, name: &str) -> bool {
    let part_of_identifier = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(part_of_identifier) && !after.is_some_and(part_of_identifier)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helpers_are_the_whole_prelude_in_order() {
        let helpers = helpers(PRELUDE);
        assert_eq!(helpers.len(), PRELUDE.matches("\nlocal function ").count());
        let joined: String = helpers.iter().map(|helper| helper.text).collect();
        assert_eq!(
            joined, PRELUDE,
            "nothing of the prelude falls between helpers"
        );
        let mut names: Vec<_> = helpers.iter().map(|helper| helper.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            helpers.len(),
            "every helper has a name of its own"
        );
    }

    #[test]
    fn a_script_carries_the_helpers_it_calls_and_those_they_call() {
        let prelude = "-- a\nlocal function a()\n    return 1\nend\n\n\
                       local function b()\n    return a()\nend\n\n\
                       local function c()\n    return 2\nend\n";
        let helpers = helpers(prelude);
        assert_eq!(
            helpers.iter().map(|h| h.name).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert!(names("return pcall(b, 1)", "b"), "passed on counts");
        assert!(!names("return bc()", "b"), "part of a longer name does not");
        assert!(!names("return ab()", "b"), "part of a longer name does not");
    }

    #[test]
    fn the_mutex_scripts_carry_their_helpers_and_no_others() {
        let acquire = with_helpers(include_str!("../scripts/mutex_acquire.lua"));
        for needed in [
            "granted",
            "grant_replayed",
            "record_grant",
            "lease_left",
            "quarantine_left",
            "now_ms",
        ] {
            let definition = format!("local function {needed}(");
            assert!(acquire.contains(&definition), "{needed} is carried");
        }
        let release = with_helpers(include_str!("../scripts/mutex_release.lua"));
        for needed in [
            "release_exclusive",
            "end_exclusive_grant",
            "grant_alive",
            "next_waiting_client",
        ] {
            let definition = format!("local function {needed}(");
            assert!(release.contains(&definition), "{needed} is carried");
        }
        // The acquire script's comments name the release's helper; it does not call it.
        assert!(!acquire.contains("local function wake_mutex_waiters("));
        for source in [&acquire, &release] {
            assert!(
                !source.contains("local function may_take("),
                "a semaphore's"
            );
            assert!(source.len() < PRELUDE.len(), "well under the whole prelude");
        }
    }
}
