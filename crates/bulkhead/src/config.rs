//! The bulkhead's configuration and its builder.

use seawall_core::{check_positive, ConfigError};

use crate::adaptive::AdaptiveConfig;
use crate::queue::{QueuePolicy, MAX_LIMIT};

/// The limits of one bulkhead. `Default` is a starting point to calibrate, not a measured limit: 8 active calls,
/// and the [`QueuePolicy`] defaults (10 waiting, 20 ms in the queue at most).
///
/// **The limits are per instance.** A bulkhead counts the calls of one process:
/// three instances of a service, each with `max_concurrent = 8`, allow up to 24
/// concurrent calls to the supplier, not 8. Size it as "what one instance may
/// take", and divide the supplier's capacity by the number of instances.
///
/// Every service built from one [`BulkheadLayer`](crate::BulkheadLayer) (and every
/// clone of them) shares the same bulkhead; build one layer per dependency to keep
/// their capacity apart.
///
/// With [`adaptive`](Self::adaptive), an algorithm sets the limit of active calls
/// between its own `min_limit` and `max_limit`, and `max_concurrent` is not used;
/// the [`queue`](Self::queue) keeps its meaning.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct BulkheadConfig {
    /// Calls allowed in the inner service at once (1 to 2^20).
    pub max_concurrent: usize,
    /// The queue in front of the slots: how many calls may wait, and for how long
    /// (a nested `queue` table in a policy file). [`QueuePolicy`] lists its options.
    pub queue: QueuePolicy,
    /// An algorithm that finds the limit of active calls from what the calls say
    /// (default none: `max_concurrent` is the limit). See [`crate::adaptive`].
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub adaptive: Option<AdaptiveConfig>,
    /// Shadow mode, to try a limit on live traffic first: the bulkhead admits,
    /// queues and times out as if enforcing, but a call it would reject goes to
    /// the inner service anyway, **beyond the limit**, counted as a shadow
    /// rejection by the cause it would have given (`full`, `timeout`, `keys`:
    /// [`Snapshot`](crate::Snapshot)'s `shadow_rejected_*`,
    /// `seawall_bulkhead_shadow_rejections_total{cause}`).
    ///
    /// - Slot accounting stays the enforcing one: a call let through holds an
    ///   over-limit permit, not a slot ([`Snapshot::over_limit`](crate::Snapshot::over_limit)),
    ///   and frees no slot when it ends, so `active ≤ limit` holds in both modes.
    /// - Waiting is part of the policy on trial: a call that finds room in the
    ///   line waits as it would, then goes through. With no queue
    ///   (`max_queue = 0`) nothing waits.
    /// - An adaptive limit learns nothing from such calls; `admitted` and the wait
    ///   histogram do not count them.
    /// - Switching ([`Handle::set_shadow`](crate::Handle::set_shadow)) applies from
    ///   the next call; [`Handle::revert`](crate::Handle::revert) returns to the
    ///   built setting.
    /// - In backpressure mode `poll_ready` still waits for a slot; only a call
    ///   made without a reserved slot goes through beyond the limit.
    ///
    /// How to read the shadow counters: [Trying a new limit in shadow
    /// mode](https://github.com/seawall-rs/seawall/blob/main/docs/operations.md#trying-a-new-limit-in-shadow-mode).
    pub shadow: bool,
}

impl Default for BulkheadConfig {
    fn default() -> Self {
        Self {
            max_concurrent: 8,
            queue: QueuePolicy::default(),
            adaptive: None,
            shadow: false,
        }
    }
}

impl BulkheadConfig {
    /// Checks every field, naming the first one at fault (the queue's as
    /// `queue.max_wait`, an algorithm's as `adaptive.min_limit`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_positive("max_concurrent", self.max_concurrent)?;
        if self.max_concurrent > MAX_LIMIT {
            return Err(ConfigError::new(
                "max_concurrent",
                format!("must be at most {MAX_LIMIT}"),
            ));
        }
        self.queue.validate().map_err(|e| e.within("queue"))?;
        if let Some(adaptive) = &self.adaptive {
            adaptive.validate()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_defaults_are_the_documented_numbers() {
        let c = BulkheadConfig::default();
        assert_eq!(
            (c.max_concurrent, c.queue.max_queue, c.queue.max_wait),
            (8, 10, Duration::from_millis(20))
        );
        assert!(c.validate().is_ok());
    }

    #[test]
    fn invalid_fields_are_named() {
        let bad = |c: BulkheadConfig| c.validate().unwrap_err().field().to_owned();
        let base = BulkheadConfig::default();
        assert_eq!(
            bad(BulkheadConfig {
                max_concurrent: 0,
                ..base
            }),
            "max_concurrent"
        );
        assert_eq!(
            bad(BulkheadConfig {
                max_concurrent: MAX_LIMIT + 1,
                ..base
            }),
            "max_concurrent"
        );
        assert_eq!(
            bad(BulkheadConfig {
                queue: QueuePolicy {
                    max_queue: MAX_LIMIT + 1,
                    ..base.queue
                },
                ..base
            }),
            "queue.max_queue"
        );
        assert_eq!(
            bad(BulkheadConfig {
                queue: QueuePolicy {
                    max_wait: Duration::ZERO,
                    ..base.queue
                },
                ..base
            }),
            "queue.max_wait"
        );
        let no_queue = BulkheadConfig {
            queue: QueuePolicy {
                max_queue: 0,
                ..base.queue
            },
            ..base
        };
        assert!(no_queue.validate().is_ok());
    }

    #[cfg(feature = "serde")]
    #[test]
    fn deserialises_with_readable_durations_and_rejects_unknown_fields() {
        let c: BulkheadConfig = from_fields(&[("max_concurrent", V::N(4))]).unwrap();
        assert_eq!(c.max_concurrent, 4);
        assert_eq!(c.queue, QueuePolicy::default());
        assert!(from_fields::<BulkheadConfig>(&[("max_concurent", V::N(4))]).is_err());
        // The queue's options live in its own table: at the top they are unknown.
        assert!(from_fields::<BulkheadConfig>(&[("max_wait", V::S("50ms"))]).is_err());

        let q: QueuePolicy = from_fields(&[("max_wait", V::S("50ms"))]).unwrap();
        assert_eq!((q.max_queue, q.max_wait), (10, Duration::from_millis(50)));
        assert!(from_fields::<QueuePolicy>(&[("max_wiat", V::S("50ms"))]).is_err());
        assert!(from_fields::<QueuePolicy>(&[("max_wait", V::S("50"))]).is_err());
    }

    /// A field value for [`from_fields`] (the workspace has no JSON crate).
    #[cfg(feature = "serde")]
    #[derive(Clone, Copy)]
    enum V {
        S(&'static str),
        N(u64),
    }

    #[cfg(feature = "serde")]
    impl<'de> serde::de::IntoDeserializer<'de, serde::de::value::Error> for V {
        type Deserializer = V;
        fn into_deserializer(self) -> V {
            self
        }
    }

    #[cfg(feature = "serde")]
    impl<'de> serde::Deserializer<'de> for V {
        type Error = serde::de::value::Error;
        fn deserialize_any<Vis: serde::de::Visitor<'de>>(
            self,
            v: Vis,
        ) -> Result<Vis::Value, Self::Error> {
            match self {
                V::S(s) => v.visit_str(s),
                V::N(n) => v.visit_u64(n),
            }
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
            bytes byte_buf option unit unit_struct newtype_struct seq tuple
            tuple_struct map struct enum identifier ignored_any
        }
    }

    #[cfg(feature = "serde")]
    fn from_fields<T: serde::de::DeserializeOwned>(
        fields: &[(&'static str, V)],
    ) -> Result<T, serde::de::value::Error> {
        T::deserialize(serde::de::value::MapDeserializer::new(
            fields.iter().copied(),
        ))
    }
}
