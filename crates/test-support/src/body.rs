//! A response body written by the test.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};

/// One frame of a [`Stream`], or the error that ends it.
pub type Sent = Result<Frame<Bytes>, std::io::Error>;

/// A response body the test writes to: the frames sent on the channel, in order,
/// ending when the sender is dropped.
#[derive(Debug)]
pub struct Stream(pub tokio::sync::mpsc::UnboundedReceiver<Sent>);

impl Body for Stream {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Sent>> {
        self.0.poll_recv(cx)
    }
}
