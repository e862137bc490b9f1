//! Every declaration against its script: the header names each key and argument where
//! the declaration puts it, and the body reads none past those declared.

use super::{DECLARED, Declared};
use crate::script::ALL;

/// The header's entries of `array` (`KEYS` or `ARGV`): each index as written (`1`,
/// `2i - 1`, `8..`) with the name that follows it (`KEYS[1] lock: ...`).
fn entries(source: &str, array: &str) -> Vec<(String, String)> {
    let header: String = source
        .lines()
        .take_while(|line| line.starts_with("--"))
        .flat_map(|line| line.trim_start_matches("--").split_whitespace())
        .collect::<Vec<_>>()
        .join(" ");
    let mut found = Vec::new();
    let mut rest = header.as_str();
    let opening = format!("{array}[");
    while let Some(at) = rest.find(&opening) {
        let after = &rest[at + opening.len()..];
        let Some((index, text)) = after.split_once(']') else {
            break;
        };
        // Only an entry says a name and a colon right after its index; a mention of
        // `KEYS[2i - 1]` inside another entry's text has none.
        let name = text.trim_start().split_once(':').and_then(|(name, _)| {
            let ok = !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_');
            ok.then(|| name.to_owned())
        });
        if let Some(name) = name {
            found.push((index.trim().to_owned(), name));
        }
        rest = text;
    }
    found
}

/// The highest literal index of `array` the script's body reads (`KEYS[3]`), 0 if none.
fn highest_read(body: &str, array: &str) -> usize {
    let opening = format!("{array}[");
    body.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .flat_map(|line| {
            line.match_indices(opening.as_str())
                .map(move |(at, _)| &line[at..])
        })
        .filter_map(|at| at[opening.len()..].split_once(']')?.0.parse::<usize>().ok())
        .max()
        .unwrap_or(0)
}

fn check(declared: &Declared) {
    let name = declared.script.name();
    let body = declared.script.body();
    for (array, fixed, each) in [
        ("KEYS", declared.keys, declared.each_keys),
        ("ARGV", declared.args, declared.each_args),
    ] {
        let entries = entries(body, array);
        let numbered: Vec<&str> = entries
            .iter()
            .filter(|(index, _)| index.parse::<usize>().is_ok())
            .map(|(_, name)| name.as_str())
            .collect();
        let repeated: Vec<&str> = entries
            .iter()
            .filter(|(index, _)| index.parse::<usize>().is_err())
            .map(|(_, name)| name.as_str())
            .collect();
        assert_eq!(
            numbered, fixed,
            "{name}: {array} of the header vs the declaration"
        );
        assert_eq!(
            repeated, each,
            "{name}: {array} per item, header vs declaration"
        );
        for (n, (index, _)) in entries.iter().enumerate() {
            if let Ok(index) = index.parse::<usize>() {
                assert_eq!(index, n + 1, "{name}: {array} described in order");
            }
        }
        // The grants hash and the latch are read by the prelude's helpers, from the end.
        let highest = highest_read(body, array);
        let limit = fixed.len() + usize::from(!each.is_empty());
        assert!(
            highest <= limit,
            "{name}: the body reads {array}[{highest}]"
        );
    }
}

#[test]
fn every_declaration_matches_its_scripts_header_and_body() {
    for declared in DECLARED {
        check(declared);
    }
}

#[test]
fn every_script_is_declared_once() {
    for script in ALL {
        let declarations = DECLARED
            .iter()
            .filter(|declared| std::ptr::eq(declared.script, *script))
            .count();
        assert_eq!(declarations, 1, "{}", script.name());
    }
}

#[test]
fn the_grant_helpers_find_their_inputs_at_the_end() {
    // The prelude's grant helpers read the grants hash and the latch as the last two
    // keys, and the grant's id and the latch's lifetime as the last two arguments.
    for declared in DECLARED {
        if declared.keys.ends_with(&["grants", "latch"]) {
            assert!(
                declared.args.ends_with(&["grant", "latch_ms"]),
                "{}",
                declared.script.name()
            );
        }
    }
}

#[test]
fn a_swapped_pair_is_caught() {
    let mutex_release = DECLARED
        .iter()
        .find(|declared| declared.script.name() == "mutex_release")
        .expect("declared");
    let mut swapped = mutex_release.args.to_vec();
    swapped.swap(0, 1);
    let entries: Vec<String> = entries(mutex_release.script.body(), "ARGV")
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    assert_ne!(entries, swapped);
    assert_eq!(entries, mutex_release.args);
}
