//! A level that always answers the same thing: the last resort that cannot fail.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::task::{Context, Poll};

use tower_service::Service;

/// A service that answers every request with a clone of one value, at once.
///
/// The natural last level ("we are having trouble, please try again in a few
/// minutes"): it has no dependency, so it cannot fail.
///
/// ```
/// use seawall_degradation::Fixed;
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let message = Fixed::new("back in a few minutes");
/// assert_eq!(message.oneshot(()).await, Ok("back in a few minutes"));
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Fixed<T> {
    value: T,
}

impl<T> Fixed<T> {
    /// Answers every request with a clone of `value`.
    pub fn new(value: T) -> Self {
        Self { value }
    }
}

impl<Req, T: Clone> Service<Req> for Fixed<T> {
    type Response = T;
    type Error = Infallible;
    type Future = Ready<Result<T, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        ready(Ok(self.value.clone()))
    }
}
