//! A request's life on the caller's side of the engine, from the future
//! that makes it to the slot a flush fills and the future collects: the
//! protocol between futures and flushes, in one folder so that it reads as
//! one. (The flush, the device's side, is `flush/`.)
//!
//! - the futures and streams of single reads and writes: `borrowed`,
//!   `owned`, `scoped`, `fragments`, and here what they share;
//! - `queue`: the requests waiting for a flush, in program order;
//! - `slot`: a request's slot, and the states that hand it between the
//!   engine and the request's future;
//! - `staging`: a driver's requests, queued without the queue lock;
//! - `buffers`: spare engine buffers, so a request allocates nothing;
//! - `lent`: bytes lent to a flush, the one type through which the engine
//!   reaches bytes it does not own.
//!
//! Soundness when a future is dropped or leaked: the engine never holds a
//! pointer to a caller's borrowed buffer. A borrowed read buffer is filled
//! by the future's own `poll`, from the engine-owned buffer of its request,
//! so only while the future (and with it the borrow) is alive. A borrowed
//! write buffer is copied into the engine when the request is queued. Owned
//! buffers (`Vec<u8>`) move into the engine and come back with the result;
//! if the future is gone by then, the engine keeps or frees the buffer.
//! Buffers lent for a scope are used in place: the scope, not the future,
//! keeps them safe (see `scope`).

mod borrowed;
mod buffers;
mod fragments;
pub(super) mod lent;
mod owned;
pub(super) mod queue;
mod scoped;
pub(super) mod slot;
pub(super) mod staging;

pub use borrowed::{Read, ReadVal, Write};
pub use fragments::Fragments;
pub use owned::{ReadOwned, WriteOwned};
pub use scoped::{ScopedRead, ScopedWrite};

use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytemuck::Pod;
use futures::Stream;

use super::outcome::{for_each_success, Fragment, PartialError};
use super::Memory;
use lent::LentBuffer;
use queue::{Buffer, Kind, Lent, NewRequest, Submission};
use slot::{Body, SlotRef};

/// A request's link to its slot in the queue.
#[derive(Debug, Clone, Copy)]
enum Ticket {
    /// Not queued yet (futures do nothing until polled).
    Unsent,
    /// Queued, in flight or done, in this slot.
    Sent(SlotRef),
    /// The result was handed out.
    Finished,
}

/// The part every request future shares.
#[derive(Debug)]
struct Request<'m> {
    mem: &'m Memory,
    ticket: Ticket,
}

impl<'m> Request<'m> {
    fn new(mem: &'m Memory) -> Self {
        Request {
            mem,
            ticket: Ticket::Unsent,
        }
    }

    /// Queues the request; `fill` initialises an engine buffer (writes).
    #[inline(always)] // see `Memory::submit`
    fn send(
        &mut self,
        cx: &Context<'_>,
        sub: Submission,
        buffer: Buffer,
        fill: impl FnOnce(&mut [u8]),
    ) {
        let waker = cx.waker();
        let slot = self.mem.submit(NewRequest { sub, buffer, waker }, fill);
        self.ticket = Ticket::Sent(slot);
    }

    /// Whether the request is done; if not, remembers the waker. A done
    /// request is seen without the queue lock.
    #[inline]
    fn is_done(&self, slot: SlotRef, cx: &Context<'_>) -> bool {
        slot.is_done() || self.is_done_locked(slot, cx)
    }

    /// `is_done` under the queue lock, so a flush cannot complete the
    /// request between the check and the waker's update.
    #[inline(never)] // polls of done requests, the usual case, skip it
    fn is_done_locked(&self, slot: SlotRef, cx: &Context<'_>) -> bool {
        self.mem.queue().poll_done(slot, cx.waker())
    }
}

impl Drop for Request<'_> {
    // Inline: most requests are dropped finished, and a call per drop
    // showed in profiles of large batches.
    #[inline]
    fn drop(&mut self) {
        if let Ticket::Sent(slot) = self.ticket {
            self.give_back(slot);
        }
    }
}

impl Request<'_> {
    /// Hands the slot of a request dropped before it finished back to the
    /// engine.
    #[inline(never)]
    fn give_back(&self, slot: SlotRef) {
        if slot.is_done() {
            slot.collected();
        } else {
            self.mem.queue().forget(slot);
        }
    }
}

/// A future of one request: how it is queued, and how its result is
/// collected. [`poll_request`] polls it.
trait Requesting<'m> {
    type Output;

    fn request(&mut self) -> &mut Request<'m>;

    /// Queues the request (first poll), or gives the output at once (an
    /// empty request).
    fn send(&mut self, cx: &Context<'_>) -> Option<Self::Output>;

    /// The output of the done request, from its slot's body.
    fn finish(&mut self, body: &mut Body) -> Self::Output;
}

/// Polls a request future. Only the collection of a done request, which
/// nearly every poll after a flush is, is inline: a join's loop over many
/// futures stays short, and everything else is one call.
#[inline(always)]
fn poll_request<'m, F: Requesting<'m>>(f: &mut F, cx: &Context<'_>) -> Poll<F::Output> {
    if let Ticket::Sent(slot) = f.request().ticket {
        if slot.is_done() {
            return Poll::Ready(collect(f, slot));
        }
    }
    poll_cold(f, cx)
}

#[inline(never)]
fn poll_cold<'m, F: Requesting<'m>>(f: &mut F, cx: &Context<'_>) -> Poll<F::Output> {
    let ticket = f.request().ticket;
    match ticket {
        Ticket::Unsent => match f.send(cx) {
            Some(out) => {
                f.request().ticket = Ticket::Finished;
                Poll::Ready(out)
            }
            None => Poll::Pending,
        },
        Ticket::Sent(slot) if f.request().is_done(slot, cx) => Poll::Ready(collect(f, slot)),
        Ticket::Sent(_) => Poll::Pending,
        Ticket::Finished => panic!("leechio request polled after it completed"),
    }
}

/// Collects a done request's output; its slot goes back to the engine.
#[inline(always)]
fn collect<'m, F: Requesting<'m>>(f: &mut F, slot: SlotRef) -> F::Output {
    // SAFETY: done, and this is the request's future.
    let out = f.finish(unsafe { slot.done_body() });
    slot.collected();
    f.request().ticket = Ticket::Finished;
    out
}

/// The result recorded in a done slot.
#[inline]
fn outcome(slot: &Body) -> Result<(), PartialError> {
    if !slot.failed {
        Ok(())
    } else {
        failed(slot)
    }
}

#[cold]
fn failed(slot: &Body) -> Result<(), PartialError> {
    Err(PartialError {
        failed: slot.failures.clone(),
        len: slot.len,
    })
}

/// Copies the bytes that were read from a done slot into `buf`.
#[inline]
fn copy_read(slot: &Body, buf: &mut [u8]) {
    let bytes = slot.bytes();
    if !slot.failed {
        copy_bytes(bytes, buf);
        return;
    }
    for_each_success(slot.len, &slot.failures, |a, b| {
        buf[a..b].copy_from_slice(&bytes[a..b])
    });
}

/// `to.copy_from_slice(from)`, without a call for the usual short reads
/// (a `memcpy` call costs more than the copy of a few words).
#[inline(always)]
fn copy_bytes(from: &[u8], to: &mut [u8]) {
    match (from.len(), <&[u8; 8]>::try_from(from)) {
        (_, Ok(word)) => to.copy_from_slice(word),
        (4, _) => to.copy_from_slice(&from[..4]),
        _ => to.copy_from_slice(from),
    }
}
