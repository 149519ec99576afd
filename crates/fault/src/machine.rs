//! The injections in force and the decision for one call, with no clock read and no
//! randomness of its own: `now` and the draws are arguments, so tests decide exactly
//! which calls get a fault.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{InjectionConfig, MAX_INJECTIONS};
use crate::fault::Fault;

/// What a call is, as far as matching goes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Facts<'a> {
    /// The request's path (HTTP).
    pub(crate) route: Option<&'a str>,
    /// The request's key (an HTTP request's host, or the key function's answer).
    pub(crate) key: Option<&'a str>,
}

/// Where an injection came from: a policy file's entries are replaced by the next
/// file; an operator's stay until stopped or expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(rename_all = "snake_case")
)]
pub enum Origin {
    /// The policy document (`[policies.<name>.fault]`) or the layer's configuration.
    Config,
    /// An operator: the admin routes, the dashboard or [`Handle::inject`](crate::Handle::inject).
    Operator,
}

/// One injection in force.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) id: u64,
    pub(crate) config: InjectionConfig,
    pub(crate) fault: Fault,
    pub(crate) expires: Instant,
    pub(crate) origin: Origin,
    /// Calls that got the fault.
    pub(crate) injected: u64,
}

impl Entry {
    fn matches(&self, facts: &Facts<'_>, http: bool) -> bool {
        (http || !self.fault.kind().needs_http())
            && self
                .config
                .route
                .as_deref()
                .is_none_or(|r| facts.route == Some(r))
            && self
                .config
                .key
                .as_deref()
                .is_none_or(|k| facts.key == Some(k))
    }
}

/// The decision for one call: which injection, and the fault as it applies to this
/// call (a latency drawn from its spread).
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub(crate) id: u64,
    pub(crate) fault: Fault,
}

/// The injections in force.
#[derive(Debug, Default)]
pub(crate) struct Armed {
    pub(crate) entries: Vec<Entry>,
    next_id: u64,
}

impl Armed {
    /// Adds an injection that ends at `expires`; `None` when [`MAX_INJECTIONS`] are
    /// already in force.
    pub(crate) fn arm(
        &mut self,
        config: InjectionConfig,
        fault: Fault,
        expires: Instant,
        origin: Origin,
    ) -> Option<u64> {
        if self.entries.len() >= MAX_INJECTIONS {
            return None;
        }
        self.next_id += 1;
        self.entries.push(Entry {
            id: self.next_id,
            config,
            fault,
            expires,
            origin,
            injected: 0,
        });
        Some(self.next_id)
    }

    /// Removes the injections whose expiry is `now` or earlier, and returns them.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<Entry> {
        self.remove(|e| e.expires <= now)
    }

    /// Removes the injections `which` selects, and returns them.
    pub(crate) fn remove(&mut self, which: impl Fn(&Entry) -> bool) -> Vec<Entry> {
        if !self.entries.iter().any(&which) {
            return Vec::new();
        }
        let (gone, kept) = std::mem::take(&mut self.entries)
            .into_iter()
            .partition(|e| which(e));
        self.entries = kept;
        gone
    }

    /// The fault for a call with `facts` at `now`, if any: the first injection in
    /// force that matches the call and whose draw falls within its `percent`. Each
    /// matching injection draws once, in order, until one fires. A layer that is not
    /// built for HTTP (`http` false) skips the faults only HTTP can carry.
    pub(crate) fn decide(
        &mut self,
        now: Instant,
        facts: &Facts<'_>,
        http: bool,
        mut draw: impl FnMut() -> f64,
    ) -> Option<Decision> {
        for entry in &mut self.entries {
            if entry.expires <= now || !entry.matches(facts, http) {
                continue;
            }
            if draw() * 100.0 >= entry.config.percent {
                continue;
            }
            entry.injected += 1;
            let fault = match entry.fault {
                Fault::Latency {
                    delay,
                    up_to: Some(up_to),
                } => Fault::latency(spread(delay, up_to, draw())),
                ref other => other.clone(),
            };
            return Some(Decision {
                id: entry.id,
                fault,
            });
        }
        None
    }
}

/// A duration between `low` and `high` at `at` (in `[0, 1)`) of the way.
fn spread(low: Duration, high: Duration, at: f64) -> Duration {
    let span = high.saturating_sub(low).as_secs_f64() * at.clamp(0.0, 1.0);
    low + Duration::try_from_secs_f64(span).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;

    fn armed(config: InjectionConfig, expires: Instant) -> Armed {
        let mut a = Armed::default();
        let fault = config.fault().unwrap();
        a.arm(config, fault, expires, Origin::Operator).unwrap();
        a
    }

    #[test]
    fn a_rate_fires_on_exactly_the_draws_below_it() {
        let now = Instant::now();
        let config = InjectionConfig::new(&Fault::Reset, SystemTime::now()).percent(30.0);
        let mut a = armed(config, now + Duration::from_secs(60));
        let mut draws = (0..100).map(|i| f64::from(i) / 100.0);
        let fired = (0..100)
            .filter(|_| {
                a.decide(now, &Facts::default(), false, || draws.next().unwrap())
                    .is_some()
            })
            .count();
        assert_eq!(fired, 30);
        assert_eq!(a.entries[0].injected, 30);
    }

    #[test]
    fn zero_percent_never_fires_and_a_hundred_always_does() {
        let now = Instant::now();
        let until = SystemTime::now();
        let later = now + Duration::from_secs(1);
        let mut never = armed(
            InjectionConfig::new(&Fault::Reset, until).percent(0.0),
            later,
        );
        let mut always = armed(InjectionConfig::new(&Fault::Reset, until), later);
        for draw in [0.0, 0.5, 0.999_999] {
            assert!(never
                .decide(now, &Facts::default(), false, || draw)
                .is_none());
            assert!(always
                .decide(now, &Facts::default(), false, || draw)
                .is_some());
        }
    }

    #[test]
    fn an_injection_ends_exactly_at_its_expiry() {
        let now = Instant::now();
        let ends = now + Duration::from_secs(10);
        let mut a = armed(
            InjectionConfig::new(&Fault::Refused, SystemTime::now()),
            ends,
        );
        let facts = Facts::default();
        assert!(a
            .decide(ends - Duration::from_millis(1), &facts, false, || 0.0)
            .is_some());
        assert!(a.decide(ends, &facts, false, || 0.0).is_none());
        assert!(a.expire(ends - Duration::from_millis(1)).is_empty());
        assert_eq!(a.expire(ends).len(), 1);
        assert!(a.entries.is_empty());
    }

    #[test]
    fn routes_and_keys_narrow_an_injection_and_http_faults_need_http() {
        let now = Instant::now();
        let later = now + Duration::from_secs(1);
        let until = SystemTime::now();
        let mut a = armed(
            InjectionConfig::new(&Fault::Reset, until)
                .route("/quote")
                .key("freight.internal"),
            later,
        );
        let quote = Facts {
            route: Some("/quote"),
            key: Some("freight.internal"),
        };
        let other_route = Facts {
            route: Some("/track"),
            ..quote
        };
        let other_key = Facts {
            key: Some("billing.internal"),
            ..quote
        };
        assert!(a.decide(now, &quote, false, || 0.0).is_some());
        assert!(a.decide(now, &other_route, false, || 0.0).is_none());
        assert!(a.decide(now, &other_key, false, || 0.0).is_none());

        let status = Fault::HttpStatus(http::StatusCode::SERVICE_UNAVAILABLE);
        let mut a = armed(InjectionConfig::new(&status, until), later);
        assert!(a.decide(now, &quote, false, || 0.0).is_none());
        assert!(a.decide(now, &quote, true, || 0.0).is_some());
    }

    #[test]
    fn a_latency_spread_is_drawn_between_its_bounds() {
        let now = Instant::now();
        let fault = Fault::Latency {
            delay: Duration::from_millis(100),
            up_to: Some(Duration::from_millis(300)),
        };
        let mut a = armed(
            InjectionConfig::new(&fault, SystemTime::now()),
            now + Duration::from_secs(1),
        );
        let mut draws = [0.0, 0.5].into_iter();
        let d = a
            .decide(now, &Facts::default(), false, || draws.next().unwrap())
            .unwrap();
        assert_eq!(d.fault, Fault::latency(Duration::from_millis(200)));
    }

    #[test]
    fn no_more_than_the_maximum_is_armed() {
        let now = Instant::now();
        let mut a = Armed::default();
        let c = InjectionConfig::new(&Fault::Reset, SystemTime::now());
        for _ in 0..MAX_INJECTIONS {
            assert!(a
                .arm(c.clone(), Fault::Reset, now, Origin::Config)
                .is_some());
        }
        assert!(a.arm(c, Fault::Reset, now, Origin::Config).is_none());
    }
}
