//! The response body: up to three shared byte chunks sent one after the other (a publication's
//! part is never copied into a per-request buffer), holding a guard that marks the connection
//! busy until the body has been handed to hyper completely.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use super::conn::Busy;

/// Chunks sent in order; empty ones are skipped.
#[derive(Debug, Default)]
pub(super) struct Chunks {
    parts: [Bytes; 3],
    next: usize,
    busy: Option<Busy>,
}

impl Chunks {
    /// A body of one chunk.
    pub(super) fn one(bytes: impl Into<Bytes>) -> Self {
        Self::from_parts([bytes.into(), Bytes::new(), Bytes::new()])
    }

    /// A body of up to three chunks.
    pub(super) fn from_parts(parts: [Bytes; 3]) -> Self {
        Self {
            parts,
            next: 0,
            busy: None,
        }
    }

    /// Keeps `busy` until the body ends.
    pub(super) fn hold(&mut self, busy: Busy) {
        self.busy = Some(busy);
    }

    fn remaining(&self) -> u64 {
        self.parts
            .iter()
            .skip(self.next)
            .map(|part| part.len() as u64)
            .sum()
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        while let Some(part) = this.parts.get_mut(this.next) {
            this.next += 1;
            if !part.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(std::mem::take(part)))));
            }
        }
        this.busy = None;
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.remaining() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining())
    }
}
