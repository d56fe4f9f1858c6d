//! The futures and streams of single reads and writes.
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

use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytemuck::Pod;
use futures::Stream;

use super::lent::LentBuffer;
use super::outcome::{for_each_success, Fragment, PartialError};
use super::queue::{Body, Buffer, Kind, Lent, NewRequest, SlotRef, Submission};
use super::Memory;

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

/// A read into a borrowed buffer; see [`Memory::read`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct Read<'m, 'b> {
    req: Request<'m>,
    addr: u64,
    buf: &'b mut [u8],
    zero_failed: bool,
}

impl<'m, 'b> Read<'m, 'b> {
    pub(super) fn new(mem: &'m Memory, addr: u64, buf: &'b mut [u8]) -> Self {
        Read {
            req: Request::new(mem),
            addr,
            buf,
            zero_failed: false,
        }
    }

    /// Writes zeros over the bytes that could not be read (they are still
    /// reported as failed).
    pub fn zero_failed(mut self) -> Self {
        self.zero_failed = true;
        self
    }
}

impl<'m> Requesting<'m> for Read<'m, '_> {
    type Output = Result<(), PartialError>;

    #[inline(always)]
    fn request(&mut self) -> &mut Request<'m> {
        &mut self.req
    }

    #[inline(always)] // into `poll_cold`, the one call of a first poll
    fn send(&mut self, cx: &Context<'_>) -> Option<Self::Output> {
        if self.buf.is_empty() {
            return Some(Ok(()));
        }
        let sub = Submission::new(Kind::Read, self.addr, self.buf.len());
        self.req.send(cx, sub, Buffer::Engine, |_| {});
        None
    }

    #[inline(always)]
    fn finish(&mut self, body: &mut Body) -> Self::Output {
        copy_read(body, self.buf);
        let result = outcome(body);
        if let (Err(e), true) = (&result, self.zero_failed) {
            e.zero_fill(self.buf);
        }
        result
    }
}

impl std::future::Future for Read<'_, '_> {
    type Output = Result<(), PartialError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_request(self.get_mut(), cx)
    }
}

/// A read of one plain-old-data value; see [`Memory::read_val`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ReadVal<'m, T> {
    req: Request<'m>,
    addr: u64,
    _value: PhantomData<fn() -> T>,
}

impl<'m, T: Pod> ReadVal<'m, T> {
    pub(super) fn new(mem: &'m Memory, addr: u64) -> Self {
        ReadVal {
            req: Request::new(mem),
            addr,
            _value: PhantomData,
        }
    }
}

impl<'m, T: Pod> Requesting<'m> for ReadVal<'m, T> {
    type Output = Result<T, PartialError>;

    #[inline(always)]
    fn request(&mut self) -> &mut Request<'m> {
        &mut self.req
    }

    #[inline(always)] // into `poll_cold`, the one call of a first poll
    fn send(&mut self, cx: &Context<'_>) -> Option<Self::Output> {
        let len = std::mem::size_of::<T>();
        if len == 0 {
            return Some(Ok(T::zeroed()));
        }
        let sub = Submission::new(Kind::Read, self.addr, len);
        self.req.send(cx, sub, Buffer::Engine, |_| {});
        None
    }

    #[inline(always)]
    fn finish(&mut self, body: &mut Body) -> Self::Output {
        outcome(body).map(|()| bytemuck::pod_read_unaligned(body.bytes()))
    }
}

impl<T: Pod> std::future::Future for ReadVal<'_, T> {
    type Output = Result<T, PartialError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_request(self.get_mut(), cx)
    }
}

/// A read or write through a buffer that moves into the engine and back:
/// what [`ReadOwned`] and [`WriteOwned`] are.
#[derive(Debug)]
struct OwnedRequest<'m> {
    req: Request<'m>,
    kind: Kind,
    addr: u64,
    /// The buffer, until the request is sent.
    buf: Option<Vec<u8>>,
}

impl<'m> OwnedRequest<'m> {
    fn new(mem: &'m Memory, kind: Kind, addr: u64, buf: Vec<u8>) -> Self {
        OwnedRequest {
            req: Request::new(mem),
            kind,
            addr,
            buf: Some(buf),
        }
    }
}

impl<'m> Requesting<'m> for OwnedRequest<'m> {
    type Output = (Vec<u8>, Result<(), PartialError>);

    #[inline(always)]
    fn request(&mut self) -> &mut Request<'m> {
        &mut self.req
    }

    #[inline(always)] // into `poll_cold`, the one call of a first poll
    fn send(&mut self, cx: &Context<'_>) -> Option<Self::Output> {
        let buf = self.buf.take().unwrap_or_default();
        if buf.is_empty() {
            return Some((buf, Ok(())));
        }
        let sub = Submission::new(self.kind, self.addr, buf.len());
        self.req.send(cx, sub, Buffer::Owned(buf), |_| {});
        None
    }

    #[inline(always)]
    fn finish(&mut self, body: &mut Body) -> Self::Output {
        let result = outcome(body);
        (std::mem::take(&mut body.data), result)
    }
}

/// A read into a buffer the engine owns until it completes; see
/// [`Memory::read_into_owned`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ReadOwned<'m>(OwnedRequest<'m>);

impl<'m> ReadOwned<'m> {
    pub(super) fn new(mem: &'m Memory, addr: u64, buf: Vec<u8>) -> Self {
        ReadOwned(OwnedRequest::new(mem, Kind::Read, addr, buf))
    }
}

impl std::future::Future for ReadOwned<'_> {
    type Output = (Vec<u8>, Result<(), PartialError>);

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_request(&mut self.get_mut().0, cx)
    }
}

/// A write; see [`Memory::write`]. Its bytes are copied into the engine
/// when it is first polled.
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct Write<'m, 'b> {
    req: Request<'m>,
    addr: u64,
    data: &'b [u8],
}

impl<'m, 'b> Write<'m, 'b> {
    pub(super) fn new(mem: &'m Memory, addr: u64, data: &'b [u8]) -> Self {
        Write {
            req: Request::new(mem),
            addr,
            data,
        }
    }
}

impl<'m> Requesting<'m> for Write<'m, '_> {
    type Output = Result<(), PartialError>;

    #[inline(always)]
    fn request(&mut self) -> &mut Request<'m> {
        &mut self.req
    }

    #[inline(always)] // into `poll_cold`, the one call of a first poll
    fn send(&mut self, cx: &Context<'_>) -> Option<Self::Output> {
        let data = self.data;
        if data.is_empty() {
            return Some(Ok(()));
        }
        let sub = Submission::new(Kind::Write, self.addr, data.len());
        self.req
            .send(cx, sub, Buffer::Engine, |buf| buf.copy_from_slice(data));
        None
    }

    #[inline(always)]
    fn finish(&mut self, body: &mut Body) -> Self::Output {
        outcome(body)
    }
}

impl std::future::Future for Write<'_, '_> {
    type Output = Result<(), PartialError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_request(self.get_mut(), cx)
    }
}

/// A write from a buffer the engine owns until it completes; see
/// [`Memory::write_from_owned`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct WriteOwned<'m>(OwnedRequest<'m>);

impl<'m> WriteOwned<'m> {
    pub(super) fn new(mem: &'m Memory, addr: u64, data: Vec<u8>) -> Self {
        WriteOwned(OwnedRequest::new(mem, Kind::Write, addr, data))
    }
}

impl std::future::Future for WriteOwned<'_> {
    type Output = (Vec<u8>, Result<(), PartialError>);

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_request(&mut self.get_mut().0, cx)
    }
}

/// A request on a buffer lent for a scope: the flush reads or writes the
/// caller's buffer itself (see [`Memory::scope`]).
#[derive(Debug)]
struct LentRequest<'s> {
    req: Request<'s>,
    kind: Kind,
    addr: u64,
    lent: Lent,
    len: usize,
    /// Reads: write zeros over the bytes that could not be read.
    zero_failed: bool,
}

impl<'s> LentRequest<'s> {
    #[inline]
    fn new(mem: &'s Memory, scope: u64, kind: Kind, addr: u64, buf: LentBuffer) -> Self {
        LentRequest {
            req: Request::new(mem),
            kind,
            addr,
            lent: Lent { buf, scope },
            len: buf.len(),
            zero_failed: false,
        }
    }
}

impl<'s> Requesting<'s> for LentRequest<'s> {
    type Output = Result<(), PartialError>;

    #[inline(always)]
    fn request(&mut self) -> &mut Request<'s> {
        &mut self.req
    }

    #[inline(always)] // into `poll_cold`, the one call of a first poll
    fn send(&mut self, cx: &Context<'_>) -> Option<Self::Output> {
        if self.len == 0 {
            return Some(Ok(()));
        }
        let sub = Submission::new(self.kind, self.addr, self.len);
        self.req.send(cx, sub, Buffer::Lent(self.lent), |_| {});
        None
    }

    #[inline(always)]
    fn finish(&mut self, body: &mut Body) -> Self::Output {
        let result = outcome(body);
        if let (Err(e), true) = (&result, self.zero_failed) {
            // SAFETY: the request is done, so no flush uses the buffer any
            // more; this future holds its borrow.
            let buf = unsafe { self.lent.buf.whole_mut() };
            e.zero_fill(buf);
        }
        result
    }
}

/// A read straight into a buffer borrowed for a scope; see
/// [`Scope::read`](super::Scope::read).
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ScopedRead<'s> {
    inner: LentRequest<'s>,
    _buf: PhantomData<&'s mut [u8]>,
}

impl<'s> ScopedRead<'s> {
    pub(super) fn new(mem: &'s Memory, scope: u64, addr: u64, buf: &'s mut [u8]) -> Self {
        ScopedRead {
            inner: LentRequest::new(mem, scope, Kind::Read, addr, LentBuffer::of_mut(buf)),
            _buf: PhantomData,
        }
    }

    /// Writes zeros over the bytes that could not be read (they are still
    /// reported as failed).
    pub fn zero_failed(mut self) -> Self {
        self.inner.zero_failed = true;
        self
    }
}

impl std::future::Future for ScopedRead<'_> {
    type Output = Result<(), PartialError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_request(&mut self.get_mut().inner, cx)
    }
}

/// A write straight from a buffer borrowed for a scope; see
/// [`Scope::write`](super::Scope::write).
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ScopedWrite<'s> {
    inner: LentRequest<'s>,
    _data: PhantomData<&'s [u8]>,
}

impl<'s> ScopedWrite<'s> {
    pub(super) fn new(mem: &'s Memory, scope: u64, addr: u64, data: &'s [u8]) -> Self {
        // The flush only reads from a write's buffer.
        ScopedWrite {
            inner: LentRequest::new(mem, scope, Kind::Write, addr, LentBuffer::of(data)),
            _data: PhantomData,
        }
    }
}

impl std::future::Future for ScopedWrite<'_> {
    type Output = Result<(), PartialError>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        poll_request(&mut self.get_mut().inner, cx)
    }
}

/// The buffer behind a [`Fragments`] stream.
#[derive(Debug)]
enum FragmentBuffer<'b> {
    Read(&'b mut [u8]),
    Write(&'b [u8]),
}

/// The pieces of one read or write as they complete, each with its own
/// result; see [`Memory::read_fragments`]. Bytes of a read fragment are in
/// the caller's buffer by the time the fragment is yielded.
#[must_use = "streams do nothing unless polled"]
#[derive(Debug)]
pub struct Fragments<'m, 'b> {
    req: Request<'m>,
    addr: u64,
    buf: FragmentBuffer<'b>,
    next: usize,
}

impl<'m, 'b> Fragments<'m, 'b> {
    pub(super) fn read(mem: &'m Memory, addr: u64, buf: &'b mut [u8]) -> Self {
        Fragments {
            req: Request::new(mem),
            addr,
            buf: FragmentBuffer::Read(buf),
            next: 0,
        }
    }

    pub(super) fn write(mem: &'m Memory, addr: u64, data: &'b [u8]) -> Self {
        Fragments {
            req: Request::new(mem),
            addr,
            buf: FragmentBuffer::Write(data),
            next: 0,
        }
    }
}

impl Stream for Fragments<'_, '_> {
    type Item = Fragment;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Fragment>> {
        let this = self.get_mut();
        match this.req.ticket {
            Ticket::Finished => Poll::Ready(None),
            Ticket::Unsent => {
                let (kind, len) = match &this.buf {
                    FragmentBuffer::Read(b) => (Kind::Read, b.len()),
                    FragmentBuffer::Write(d) => (Kind::Write, d.len()),
                };
                if len == 0 {
                    this.req.ticket = Ticket::Finished;
                    return Poll::Ready(None);
                }
                let mut sub = Submission::new(kind, this.addr, len);
                sub.record = true;
                let buf = &this.buf;
                this.req.send(cx, sub, Buffer::Engine, |engine| {
                    if let FragmentBuffer::Write(data) = buf {
                        engine.copy_from_slice(data);
                    }
                });
                Poll::Pending
            }
            Ticket::Sent(slot) => {
                if !this.req.is_done(slot, cx) {
                    return Poll::Pending;
                }
                // SAFETY: done, and this is the request's stream.
                let body = unsafe { slot.done_body() };
                let Some(&fragment) = body.fragments.get(this.next) else {
                    slot.collected();
                    this.req.ticket = Ticket::Finished;
                    return Poll::Ready(None);
                };
                if let (Ok(()), FragmentBuffer::Read(buf)) = (fragment.result, &mut this.buf) {
                    let range = fragment.offset..fragment.offset + fragment.len;
                    buf[range.clone()].copy_from_slice(&body.bytes()[range]);
                }
                this.next += 1;
                Poll::Ready(Some(fragment))
            }
        }
    }
}
