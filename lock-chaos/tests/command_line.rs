//! The harness's command line, as `cargo xtask chaos` and CI call it: its commands, and
//! a typed refusal of a backend or kind it does not know. (Being an integration test, it
//! also makes `cargo xtask test` build the harness itself, which `cargo xtask chaos`
//! then runs without building it again with other features.)

use std::process::{Command, Output};

fn chaos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lock-chaos"))
        .args(args)
        .output()
        .expect("the harness runs")
}

#[test]
fn help_lists_every_command() {
    let output = chaos(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for command in ["run", "worker", "store"] {
        assert!(
            help.lines()
                .any(|line| line.trim_start().starts_with(command)),
            "{command} missing from:\n{help}"
        );
    }
}

#[test]
fn an_unknown_backend_or_kind_is_refused_with_the_known_ones() {
    for (flag, known) in [
        ("--backend", "redis, fred, redlock, postgres"),
        ("--kind", "mutex, fair, rw, semaphore"),
    ] {
        let output = chaos(&["run", flag, "nosuch"]);
        assert_eq!(output.status.code(), Some(2), "{flag} nosuch");
        let error = String::from_utf8_lossy(&output.stderr);
        assert!(
            error.contains("invalid value 'nosuch'") && error.contains(known),
            "{flag}: {error}"
        );
    }
}
