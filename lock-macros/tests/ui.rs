//! Compile-time behaviour: mistakes are errors that point at the offending token
//! (`ui/fail`, with the expected messages checked in). The accepted forms are compiled
//! and run with the other tests (`forms.rs`): a passing case here would make trybuild
//! generate code for every dependency, where failing cases need only a type check.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
}
