//! The dependency's own backoff signals: `Retry-After` on a 429 or a 503, and gRPC's
//! `grpc-retry-pushback-ms`. Pure parsing; the policy decides what to do with them.

use std::time::Duration;

use crate::classify::ClassifyInput;
use crate::time::MAX_DURATION;

/// What a dependency said about trying again, read from a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pushback {
    /// Nothing: the policy's own backoff decides.
    #[default]
    None,
    /// Not before this long: a retry waits at least this, and is not made at all if
    /// that wait plus `min_attempt_time` does not fit in the deadline.
    After(Duration),
    /// Do not retry (a negative or malformed `grpc-retry-pushback-ms`).
    Stop,
}

/// Reads a [`Pushback`] from a result. Implemented for every
/// `Fn(ClassifyInput<'_, Res>) -> Pushback`.
pub trait ReadPushback<Res> {
    /// What `result` says about trying again.
    fn pushback(&self, result: ClassifyInput<'_, Res>) -> Pushback;
}

impl<Res, F> ReadPushback<Res> for F
where
    F: Fn(ClassifyInput<'_, Res>) -> Pushback,
{
    fn pushback(&self, result: ClassifyInput<'_, Res>) -> Pushback {
        self(result)
    }
}

/// The default: no signal is read, for any response type.
#[derive(Debug, Clone, Copy, Default)]
pub struct IgnorePushback;

impl<Res> ReadPushback<Res> for IgnorePushback {
    fn pushback(&self, _result: ClassifyInput<'_, Res>) -> Pushback {
        Pushback::None
    }
}

/// Reads an `http::Response`'s signals:
///
/// - `grpc-retry-pushback-ms` (a gRPC server's pushback, in the headers of a
///   trailers-only response): a whole number of milliseconds to wait; a negative or
///   malformed value means do not retry, as gRPC's retry design says.
/// - `Retry-After` on a `429 Too Many Requests` or a `503 Service Unavailable`, in
///   delay-seconds. An HTTP-date is not read (it would compare this host's clock
///   with the server's); a malformed value is ignored.
///
/// gRPC statuses delivered as errors (a tonic `Status` with `RESOURCE_EXHAUSTED`) are
/// not read: gRPC calls are not retried by the default rule (they are POSTs).
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpPushback;

impl<B> ReadPushback<http::Response<B>> for HttpPushback {
    fn pushback(&self, result: ClassifyInput<'_, http::Response<B>>) -> Pushback {
        let Ok(res) = result else {
            return Pushback::None;
        };
        if let Some(value) = res.headers().get("grpc-retry-pushback-ms") {
            return match value.to_str().ok().map(str::trim).map(str::parse::<i64>) {
                Some(Ok(ms)) if ms >= 0 => {
                    Pushback::After(Duration::from_millis(ms.unsigned_abs()).min(MAX_DURATION))
                }
                _ => Pushback::Stop,
            };
        }
        let status = res.status().as_u16();
        if status != 429 && status != 503 {
            return Pushback::None;
        }
        match res
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .and_then(|v| v.parse::<u64>().ok())
        {
            Some(secs) => Pushback::After(Duration::from_secs(secs).min(MAX_DURATION)),
            None => Pushback::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(status: u16, header: (&str, &str)) -> Pushback {
        let res = http::Response::builder()
            .status(status)
            .header(header.0, header.1)
            .body(())
            .unwrap();
        HttpPushback.pushback(Ok(&res))
    }

    #[test]
    fn retry_after_counts_on_429_and_503_only() {
        let second = Duration::from_secs(1);
        assert_eq!(read(503, ("retry-after", "2")), Pushback::After(2 * second));
        assert_eq!(
            read(429, ("retry-after", " 0 ")),
            Pushback::After(Duration::ZERO)
        );
        assert_eq!(read(500, ("retry-after", "2")), Pushback::None);
        assert_eq!(
            read(503, ("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")),
            Pushback::None
        );
        assert_eq!(read(503, ("retry-after", "-3")), Pushback::None);
        assert_eq!(
            read(503, ("retry-after", "99999999999999999")),
            Pushback::After(MAX_DURATION)
        );
    }

    #[test]
    fn grpc_pushback_negative_or_malformed_means_stop() {
        let ms = Duration::from_millis(1);
        assert_eq!(
            read(200, ("grpc-retry-pushback-ms", "250")),
            Pushback::After(250 * ms)
        );
        assert_eq!(read(200, ("grpc-retry-pushback-ms", "-1")), Pushback::Stop);
        assert_eq!(
            read(200, ("grpc-retry-pushback-ms", "soon")),
            Pushback::Stop
        );
        assert_eq!(read(200, ("grpc-retry-pushback-ms", "")), Pushback::Stop);
        let err: crate::BoxError = "reset".into();
        assert_eq!(
            HttpPushback.pushback(Err::<&http::Response<()>, _>(crate::ErrorRef::from(&*err))),
            Pushback::None
        );
    }
}
