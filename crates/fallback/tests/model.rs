//! A proptest-driven schedule of calls (every kind of primary result, every kind of
//! step outcome) interleaved with operator controls and reconfigurations, checked
//! against a model after every step: what the caller got, and every counter.
#![allow(clippy::unwrap_used)] // helpers outside `#[test]` functions too

use std::time::Duration;

use proptest::prelude::*;
use seawall_core::{
    classify_fn, BoxError, BulkheadFull, BulkheadTimeout, CircuitOpen, ClassifyInput,
    DeadlineExceeded, FallbacksExhausted, Outcome,
};
use seawall_fallback::{
    FallbackLayer, FallbackRequest, Mark, RejectionKind, Rejections, Served, Trigger, Unavailable,
};
use tower::{service_fn, Layer, ServiceExt};

#[derive(Debug, Clone, Copy, PartialEq)]
enum PrimaryDoes {
    Answer,
    AnswerFailed,
    Reject(RejectionKind),
    TypedError,
    OtherError,
    IgnoredError,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum StepDoes {
    Answer,
    Fail,
    Decline,
    Hang,
}

#[derive(Debug, Clone)]
struct Call {
    primary: PrimaryDoes,
    steps: [StepDoes; 3],
}

#[derive(Debug, Clone)]
enum Op {
    Call(Call),
    Enable(bool),
    Force(bool),
    Select(Rejections),
}

#[derive(Debug, Clone, PartialEq)]
struct Quote {
    failed: bool,
    from: &'static str,
    source: Option<Served>,
}

impl Mark for Quote {
    fn mark(&mut self, served: Served) {
        self.source = Some(served);
    }
}

#[derive(Debug)]
struct Typed;
impl std::fmt::Display for Typed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("typed")
    }
}
impl std::error::Error for Typed {}

const KINDS: [RejectionKind; 4] = [
    RejectionKind::CircuitOpen,
    RejectionKind::BulkheadFull,
    RejectionKind::BulkheadTimeout,
    RejectionKind::DeadlineExceeded,
];

fn primary_does() -> impl Strategy<Value = PrimaryDoes> {
    prop_oneof![
        Just(PrimaryDoes::Answer),
        Just(PrimaryDoes::AnswerFailed),
        (0..KINDS.len()).prop_map(|i| PrimaryDoes::Reject(KINDS[i])),
        Just(PrimaryDoes::TypedError),
        Just(PrimaryDoes::OtherError),
        Just(PrimaryDoes::IgnoredError),
    ]
}

fn step_does() -> impl Strategy<Value = StepDoes> {
    prop_oneof![
        Just(StepDoes::Answer),
        Just(StepDoes::Fail),
        Just(StepDoes::Decline),
        Just(StepDoes::Hang),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (primary_does(), [step_does(), step_does(), step_does()])
            .prop_map(|(primary, steps)| Op::Call(Call { primary, steps })),
        1 => any::<bool>().prop_map(Op::Enable),
        1 => any::<bool>().prop_map(Op::Force),
        1 => (0u8..16).prop_map(|bits| {
            KINDS
                .iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .map(|(_, k)| *k)
                .collect::<Rejections>()
        })
        .prop_map(Op::Select),
    ]
}

fn error_for(primary: PrimaryDoes) -> BoxError {
    match primary {
        PrimaryDoes::Reject(RejectionKind::CircuitOpen) => {
            Box::new(CircuitOpen::new("b".into(), Duration::from_secs(1)))
        }
        PrimaryDoes::Reject(RejectionKind::BulkheadFull) => Box::new(BulkheadFull::new("b".into())),
        PrimaryDoes::Reject(RejectionKind::BulkheadTimeout) => {
            Box::new(BulkheadTimeout::new("b".into(), Duration::from_millis(1)))
        }
        PrimaryDoes::Reject(_) => Box::new(DeadlineExceeded::new()),
        PrimaryDoes::TypedError => Box::new(Typed),
        PrimaryDoes::IgnoredError => "ignored".into(),
        _ => "other".into(),
    }
}

/// What the caller should get.
#[derive(Debug, PartialEq)]
enum Expected {
    Primary,
    PassedThroughError,
    Served(usize, Trigger),
    Unavailable(usize),
    Exhausted,
}

#[derive(Debug, Default)]
struct Model {
    disabled: bool,
    forced: bool,
    rejections: Rejections,
    triggered: [u64; 9],
    passed_through: u64,
    served: [u64; 3],
    failed: [u64; 3],
    timed_out: [u64; 3],
    unavailable: [u64; 3],
    exhausted: u64,
}

impl Model {
    fn call(&mut self, call: &Call) -> Expected {
        let trigger = if self.forced && !self.disabled {
            Some(Trigger::Forced)
        } else {
            let fired = match call.primary {
                PrimaryDoes::Answer => return Expected::Primary,
                PrimaryDoes::AnswerFailed => Some(Trigger::FailedResponse),
                PrimaryDoes::Reject(kind) => self
                    .rejections
                    .contains(kind)
                    .then_some(Trigger::Rejected(kind)),
                PrimaryDoes::TypedError => Some(Trigger::ErrorType),
                PrimaryDoes::OtherError => Some(Trigger::FailedError),
                PrimaryDoes::IgnoredError => None,
            };
            match fired {
                Some(t) if !self.disabled => Some(t),
                _ if call.primary == PrimaryDoes::AnswerFailed => return Expected::Primary,
                _ => {
                    self.passed_through += 1;
                    return Expected::PassedThroughError;
                }
            }
        };
        let Some(trigger) = trigger else {
            return Expected::Primary;
        };
        self.triggered[trigger.index()] += 1;
        for (i, step) in call.steps.iter().enumerate() {
            match step {
                StepDoes::Answer => {
                    self.served[i] += 1;
                    return Expected::Served(i, trigger);
                }
                StepDoes::Decline => {
                    self.unavailable[i] += 1;
                    return Expected::Unavailable(i);
                }
                StepDoes::Fail => self.failed[i] += 1,
                StepDoes::Hang => self.timed_out[i] += 1,
            }
        }
        self.exhausted += 1;
        Expected::Exhausted
    }
}

const STEPS: [&str; 3] = ["real-time", "cache", "last-known"];

type StepFut = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Quote, BoxError>> + Send>>;

fn step_fut(
    i: usize,
) -> impl Fn(FallbackRequest<[StepDoes; 3]>) -> StepFut + Send + Sync + 'static {
    move |req| {
        let does = req.captured()[i];
        Box::pin(async move {
            match does {
                StepDoes::Answer => Ok(Quote {
                    failed: false,
                    from: STEPS[i],
                    source: None,
                }),
                StepDoes::Fail => Err("step failed".into()),
                StepDoes::Decline => Err(Unavailable::new("nothing valid").into()),
                StepDoes::Hang => std::future::pending().await,
            }
        })
    }
}

fn check(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = seawall_test_support::paused_runtime();
    rt.block_on(async move {
        let classifier = classify_fn(|r: ClassifyInput<'_, Quote>| match r {
            Ok(q) if q.failed => Outcome::Failure,
            Ok(_) => Outcome::Success,
            Err(e) if e.to_string() == "ignored" => Outcome::Ignore,
            Err(_) => Outcome::Failure,
        });
        let layer = FallbackLayer::builder("model")
            .capture(|r: &http::Request<Call>| r.body().steps)
            .on_failure(classifier)
            .on_error::<Typed>()
            .step("real-time", Duration::from_millis(10), step_fut(0))
            .step("cache", Duration::from_millis(10), step_fut(1))
            .step("last-known", Duration::from_millis(10), step_fut(2))
            .build()
            .unwrap();
        let handle = layer.handle();
        let primary = service_fn(|r: http::Request<Call>| async move {
            match r.body().primary {
                PrimaryDoes::Answer => Ok(Quote {
                    failed: false,
                    from: "primary",
                    source: None,
                }),
                PrimaryDoes::AnswerFailed => Ok(Quote {
                    failed: true,
                    from: "primary",
                    source: None,
                }),
                other => Err(error_for(other)),
            }
        });
        let svc = layer.layer(primary);
        let mut model = Model::default();
        for op in ops {
            match op {
                Op::Enable(on) => {
                    if on {
                        handle.enable();
                    } else {
                        handle.disable();
                    }
                    model.disabled = !on;
                }
                Op::Force(on) => {
                    if on {
                        handle.force();
                    } else {
                        handle.release();
                    }
                    model.forced = on;
                }
                Op::Select(kinds) => {
                    let mut config = handle.config();
                    config.on_rejections = kinds;
                    // The classifier and the error type keep it valid even with no kind.
                    handle.reconfigure(config).unwrap();
                    model.rejections = kinds;
                }
                Op::Call(call) => {
                    let expected = model.call(&call);
                    let got = svc.clone().oneshot(http::Request::new(call.clone())).await;
                    match (&expected, got) {
                        (Expected::Primary, Ok(q)) => {
                            prop_assert_eq!(q.from, "primary");
                            prop_assert!(q.source.is_none());
                        }
                        (Expected::PassedThroughError, Err(e)) => {
                            // Untouched: the primary's own error.
                            prop_assert_eq!(e.to_string(), error_for(call.primary).to_string());
                        }
                        (Expected::Served(i, trigger), Ok(q)) => {
                            prop_assert_eq!(q.from, STEPS[*i]);
                            let served = q.source.unwrap();
                            prop_assert_eq!(served.step(), STEPS[*i]);
                            prop_assert_eq!(served.trigger(), *trigger);
                        }
                        (Expected::Unavailable(i), Err(e)) => {
                            let u = Unavailable::find(&*e).unwrap();
                            prop_assert_eq!(u.step(), Some(STEPS[*i]));
                        }
                        (Expected::Exhausted, Err(e)) => {
                            let ex = e.downcast_ref::<FallbacksExhausted>().unwrap();
                            prop_assert_eq!(ex.steps().len(), 3);
                        }
                        (expected, got) => {
                            prop_assert!(
                                false,
                                "expected {:?}, got {:?}",
                                expected,
                                got.map(|q| q.from)
                            );
                        }
                    }
                }
            }
            let snap = handle.snapshot();
            for t in Trigger::ALL {
                prop_assert_eq!(snap.triggered(t), model.triggered[t.index()], "{}", t);
            }
            prop_assert_eq!(snap.passed_through, model.passed_through);
            prop_assert_eq!(snap.exhausted, model.exhausted);
            for (i, name) in STEPS.iter().enumerate() {
                let s = snap.step(name).unwrap();
                prop_assert_eq!(
                    (s.served, s.failed, s.timed_out, s.unavailable),
                    (
                        model.served[i],
                        model.failed[i],
                        model.timed_out[i],
                        model.unavailable[i]
                    )
                );
            }
            let fired: u64 = snap.triggered.iter().map(|c| c.count).sum();
            prop_assert_eq!(fired, snap.served + snap.unavailable + snap.exhausted);
            prop_assert_eq!(snap.enabled, !model.disabled);
        }
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn every_call_matches_the_model_and_the_counters_add_up(ops in proptest::collection::vec(op(), 1..40)) {
        check(ops)?;
    }
}
