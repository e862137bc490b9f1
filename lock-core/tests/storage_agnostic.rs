//! lock-core knows no storage: backends live in their own crates, and nothing in `src/`
//! names a Redis concept. This test reads the sources and fails on the first word that
//! would tie the core to one backend again.

mod common;

use std::path::Path;

use common::rust_files;

/// Words that belong to the Redis protocol crate, matched case-insensitively as whole
/// words; "redis" also inside a word (Redisson).
const FORBIDDEN: &[&str] = &[
    "lua",
    "wrongtype",
    "evalsha",
    "fcall",
    "noscript",
    "pexpire",
    "hincrby",
    "cluster slot",
    "hash tag",
];

fn names_a_word(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

#[test]
fn the_core_sources_name_no_redis_concept() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 10, "found only {files:?}");
    let mut offences = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (number, line) in text.lines().enumerate() {
            let lower = line.to_lowercase();
            if lower.contains("redis") {
                offences.push(format!("{}:{}: {line}", file.display(), number + 1));
            }
            for word in FORBIDDEN {
                if names_a_word(&lower, word) {
                    offences.push(format!(
                        "{}:{}: `{word}`: {line}",
                        file.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(offences.is_empty(), "{}", offences.join("\n"));
}
