//! Compile-time behaviour: accepted forms compile (`ui/pass`), mistakes are errors that
//! point at the offending token (`ui/fail`, with the expected messages checked in).

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
