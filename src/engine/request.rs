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

use super::outcome::{for_each_success, Fragment, PartialError};
use super::queue::{Body, Buffer, Kind, Lent, NewRequest, SlotRef, Submission};
use super::Memory;

/// A request's link to its slot in the queue.
#[derive(Debug)]
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

    /// `Pending` until the request is done; then `finish` collects the
    /// result from the slot, which goes back to the engine afterwards.
    fn poll_done<R>(&mut self, cx: &Context<'_>, finish: impl FnOnce(&mut Body) -> R) -> Poll<R> {
        let slot = match self.ticket {
            Ticket::Sent(slot) => slot,
            Ticket::Unsent => unreachable!("poll_done before send"),
            Ticket::Finished => panic!("leechio request polled after it completed"),
        };
        if !self.is_done(slot, cx) {
            return Poll::Pending;
        }
        // SAFETY: done, and this is the request's future.
        let out = finish(unsafe { slot.done_body() });
        slot.collected();
        self.ticket = Ticket::Finished;
        Poll::Ready(out)
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

/// The result recorded in a done slot.
fn outcome(slot: &Body) -> Result<(), PartialError> {
    if slot.failures.is_empty() {
        Ok(())
    } else {
        Err(PartialError {
            failed: slot.failures.clone(),
            len: slot.len,
        })
    }
}

/// Copies the bytes that were read from a done slot into `buf`.
fn copy_read(slot: &Body, buf: &mut [u8]) {
    if slot.failures.is_empty() {
        buf.copy_from_slice(&slot.data[..slot.len]);
        return;
    }
    for_each_success(slot.len, &slot.failures, |a, b| {
        buf[a..b].copy_from_slice(&slot.data[a..b])
    });
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

impl std::future::Future for Read<'_, '_> {
    type Output = Result<(), PartialError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Ticket::Unsent = this.req.ticket {
            if this.buf.is_empty() {
                this.req.ticket = Ticket::Finished;
                return Poll::Ready(Ok(()));
            }
            this.req.send(
                cx,
                Submission::new(Kind::Read, this.addr, this.buf.len()),
                Buffer::Engine,
                |_| {},
            );
            return Poll::Pending;
        }
        let (buf, zero) = (&mut *this.buf, this.zero_failed);
        this.req.poll_done(cx, |slot| {
            copy_read(slot, buf);
            let result = outcome(slot);
            if let (Err(e), true) = (&result, zero) {
                e.zero_fill(buf);
            }
            result
        })
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

impl<T: Pod> std::future::Future for ReadVal<'_, T> {
    type Output = Result<T, PartialError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let len = std::mem::size_of::<T>();
        if let Ticket::Unsent = this.req.ticket {
            if len == 0 {
                this.req.ticket = Ticket::Finished;
                return Poll::Ready(Ok(T::zeroed()));
            }
            this.req.send(
                cx,
                Submission::new(Kind::Read, this.addr, len),
                Buffer::Engine,
                |_| {},
            );
            return Poll::Pending;
        }
        this.req.poll_done(cx, |slot| {
            outcome(slot).map(|()| bytemuck::pod_read_unaligned(&slot.data[..len]))
        })
    }
}

/// A read into a buffer the engine owns until it completes; see
/// [`Memory::read_into_owned`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ReadOwned<'m> {
    req: Request<'m>,
    addr: u64,
    buf: Option<Vec<u8>>,
}

impl<'m> ReadOwned<'m> {
    pub(super) fn new(mem: &'m Memory, addr: u64, buf: Vec<u8>) -> Self {
        ReadOwned {
            req: Request::new(mem),
            addr,
            buf: Some(buf),
        }
    }
}

impl std::future::Future for ReadOwned<'_> {
    type Output = (Vec<u8>, Result<(), PartialError>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Ticket::Unsent = this.req.ticket {
            let buf = this.buf.take().unwrap_or_default();
            if buf.is_empty() {
                this.req.ticket = Ticket::Finished;
                return Poll::Ready((buf, Ok(())));
            }
            let sub = Submission::new(Kind::Read, this.addr, buf.len());
            this.req.send(cx, sub, Buffer::Owned(buf), |_| {});
            return Poll::Pending;
        }
        this.req.poll_done(cx, |slot| {
            let result = outcome(slot);
            (std::mem::take(&mut slot.data), result)
        })
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

impl std::future::Future for Write<'_, '_> {
    type Output = Result<(), PartialError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Ticket::Unsent = this.req.ticket {
            if this.data.is_empty() {
                this.req.ticket = Ticket::Finished;
                return Poll::Ready(Ok(()));
            }
            let data = this.data;
            let sub = Submission::new(Kind::Write, this.addr, data.len());
            this.req
                .send(cx, sub, Buffer::Engine, |buf| buf.copy_from_slice(data));
            return Poll::Pending;
        }
        this.req.poll_done(cx, |slot| outcome(slot))
    }
}

/// A write from a buffer the engine owns until it completes; see
/// [`Memory::write_from_owned`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct WriteOwned<'m> {
    req: Request<'m>,
    addr: u64,
    data: Option<Vec<u8>>,
}

impl<'m> WriteOwned<'m> {
    pub(super) fn new(mem: &'m Memory, addr: u64, data: Vec<u8>) -> Self {
        WriteOwned {
            req: Request::new(mem),
            addr,
            data: Some(data),
        }
    }
}

impl std::future::Future for WriteOwned<'_> {
    type Output = (Vec<u8>, Result<(), PartialError>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Ticket::Unsent = this.req.ticket {
            let data = this.data.take().unwrap_or_default();
            if data.is_empty() {
                this.req.ticket = Ticket::Finished;
                return Poll::Ready((data, Ok(())));
            }
            let sub = Submission::new(Kind::Write, this.addr, data.len());
            this.req.send(cx, sub, Buffer::Owned(data), |_| {});
            return Poll::Pending;
        }
        this.req.poll_done(cx, |slot| {
            let result = outcome(slot);
            (std::mem::take(&mut slot.data), result)
        })
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
}

// SAFETY: the pointer stands for a `&mut [u8]` (reads) or `&[u8]` (writes)
// borrowed for the scope, both `Send` and `Sync`; a shared
// `LentRequest` gives no access to it.
unsafe impl Send for LentRequest<'_> {}
unsafe impl Sync for LentRequest<'_> {}

impl<'s> LentRequest<'s> {
    #[inline]
    fn new(mem: &'s Memory, scope: u64, kind: Kind, addr: u64, ptr: *const u8, len: usize) -> Self {
        // (A slice's pointer is never null, even when it is empty.)
        let ptr = std::ptr::NonNull::new(ptr as *mut u8).expect("a slice's pointer");
        LentRequest {
            req: Request::new(mem),
            kind,
            addr,
            lent: Lent { ptr, scope },
            len,
        }
    }

    #[inline]
    fn poll(&mut self, cx: &Context<'_>, zero_failed: bool) -> Poll<Result<(), PartialError>> {
        if let Ticket::Unsent = self.req.ticket {
            if self.len == 0 {
                self.req.ticket = Ticket::Finished;
                return Poll::Ready(Ok(()));
            }
            let sub = Submission::new(self.kind, self.addr, self.len);
            self.req.send(cx, sub, Buffer::Lent(self.lent), |_| {});
            return Poll::Pending;
        }
        let (lent, len) = (self.lent, self.len);
        self.req.poll_done(cx, |slot| {
            let result = outcome(slot);
            if let (Err(e), true) = (&result, zero_failed) {
                // SAFETY: the request is done, so no flush uses the buffer
                // any more; this future holds its borrow.
                e.zero_fill(unsafe { std::slice::from_raw_parts_mut(lent.ptr.as_ptr(), len) });
            }
            result
        })
    }
}

/// A read straight into a buffer borrowed for a scope; see
/// [`Scope::read`](super::Scope::read).
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ScopedRead<'s> {
    inner: LentRequest<'s>,
    zero_failed: bool,
    _buf: PhantomData<&'s mut [u8]>,
}

impl<'s> ScopedRead<'s> {
    pub(super) fn new(mem: &'s Memory, scope: u64, addr: u64, buf: &'s mut [u8]) -> Self {
        ScopedRead {
            inner: LentRequest::new(mem, scope, Kind::Read, addr, buf.as_mut_ptr(), buf.len()),
            zero_failed: false,
            _buf: PhantomData,
        }
    }

    /// Writes zeros over the bytes that could not be read (they are still
    /// reported as failed).
    pub fn zero_failed(mut self) -> Self {
        self.zero_failed = true;
        self
    }
}

impl std::future::Future for ScopedRead<'_> {
    type Output = Result<(), PartialError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.inner.poll(cx, this.zero_failed)
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
            inner: LentRequest::new(mem, scope, Kind::Write, addr, data.as_ptr(), data.len()),
            _data: PhantomData,
        }
    }
}

impl std::future::Future for ScopedWrite<'_> {
    type Output = Result<(), PartialError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.get_mut().inner.poll(cx, false)
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
                    buf[range.clone()].copy_from_slice(&body.data[range]);
                }
                this.next += 1;
                Poll::Ready(Some(fragment))
            }
        }
    }
}
