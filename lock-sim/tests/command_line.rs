//! The simulator's command line, as `cargo xtask simulate` and CI call it: a short run
//! passes and says so, and a malformed argument is refused, pointing to `--help`. (Being an
//! integration test, it also makes `cargo xtask test` build the simulator itself, which
//! `cargo xtask simulate` then runs without building it again with other features.)

use std::process::{Command, Output};

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lock-sim"))
        .args(args)
        .output()
        .expect("the simulator runs")
}

#[test]
fn a_short_run_holds_every_invariant() {
    let output = simulate(&["--seeds", "2", "--first", "7"]);
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{said}");
    assert!(
        said.contains("2 seeds, every invariant held"),
        "unexpected summary:\n{said}"
    );
}

#[test]
fn a_malformed_argument_is_refused_with_a_pointer_to_the_help() {
    let output = simulate(&["--seeds", "x"]);
    assert_eq!(output.status.code(), Some(2));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("'x' for '--seeds <N>'"), "{error}");
    assert!(error.contains("try '--help'"), "{error}");
}
