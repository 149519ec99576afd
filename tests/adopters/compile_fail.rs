//! The mistakes users are most likely to make, and the compiler limitation the
//! suite works around, as programs that must not compile (`compile_fail/*.rs`, run by
//! `trybuild`):
//!
//! | case | the user's mistake | what the error must say |
//! |---|---|---|
//! | `classifier_wrong_signature` | a classifier over the result by value, returning a bool | the expected signature, `for<'a> fn(Result<&'a u32, ErrorRef<'a>>) -> _` |
//! | `bulkhead_inner_not_clone` | a client that is not `Clone` under a bulkhead | that `Clone` is missing, and `#[derive(Clone)]` |
//! | `tower_timeout_boxerror_closure` | (no mistake) a `service_fn` closure returning `Result<_, BoxError>` awaited through tower's `Timeout` in a spawned task | "is not general enough" (rust-lang/rust#64552) |
//!
//! The classifier case hands the service to `BoxCloneSyncService::new`, a function
//! with a `Service<Req>` bound: there the compiler names the fix. Called as a method
//! instead (`svc.oneshot(req)`, `svc.ready()`), a wrong classifier, and a bare closure
//! classifier under `hold_until_body_end` (which needs `classify_fn`), end in E0599,
//! "the method `oneshot` exists for struct `CircuitBreaker<..>`, but its trait bounds
//! were not satisfied", which names neither the classifier's signature nor
//! `classify_fn`: the compiler stops at the unsatisfied `Service<_>` bound. The
//! bulkhead case is written as users write it (`bulkhead.layer(Store)`, then
//! `oneshot` in a spawned task): the bulkhead's `Layer` impl requires `S: Clone`, so
//! the error comes where the client is layered and names `Clone`.
//!
//! `trybuild` compares the whole compiler output with each case's `.stderr` file; a
//! new compiler may word it differently, and the bulkhead case quotes the bulkhead's
//! `Service` impl. Regenerate them with
//! `TRYBUILD=overwrite cargo test --all-features --test adopters compile_fail`, read
//! the diff, and keep the substring each case is about, which
//! `the_expected_errors_name_the_fix` checks. If the third case starts to compile,
//! the compiler is fixed: drop the workaround (inner services naming their error
//! type) from the docs and this case.

/// Each case and the part of its expected error that matters.
const CASES: [(&str, &str); 3] = [
    (
        "classifier_wrong_signature",
        "expected closure signature `for<'a> fn(Result<&'a u32, ErrorRef<'a>>) -> _`",
    ),
    (
        "bulkhead_inner_not_clone",
        "consider annotating `Store` with `#[derive(Clone)]`",
    ),
    ("tower_timeout_boxerror_closure", "is not general enough"),
];

#[test]
fn the_likely_mistakes_do_not_compile() {
    let cases = trybuild::TestCases::new();
    for (case, _) in CASES {
        cases.compile_fail(format!("tests/adopters/compile_fail/{case}.rs"));
    }
}

#[test]
fn the_expected_errors_name_the_fix() {
    for (case, substring) in CASES {
        let path = format!(
            "{}/tests/adopters/compile_fail/{case}.stderr",
            env!("CARGO_MANIFEST_DIR")
        );
        let expected = std::fs::read_to_string(&path).expect("the case's expected error");
        assert!(
            expected.contains(substring),
            "{path} no longer says {substring:?}:\n{expected}"
        );
    }
}
