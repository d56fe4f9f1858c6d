//! Reads and writes of buffers lent for a scope: the device uses the
//! caller's buffer in place; the scope, not the future, keeps it safe (see
//! `scope`).

use super::*;

/// A request on a buffer lent for a scope: the flush reads or writes the
/// caller's buffer itself (see [`Memory::scope`]).
#[derive(Debug)]
pub(super) struct LentRequest<'s> {
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
    pub(in crate::engine) fn new(
        mem: &'s Memory,
        scope: u64,
        kind: Kind,
        addr: u64,
        buf: LentBuffer,
    ) -> Self {
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
/// [`Scope::read`](crate::engine::Scope::read).
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ScopedRead<'s> {
    inner: LentRequest<'s>,
    _buf: PhantomData<&'s mut [u8]>,
}

impl<'s> ScopedRead<'s> {
    pub(in crate::engine) fn new(
        mem: &'s Memory,
        scope: u64,
        addr: u64,
        buf: &'s mut [u8],
    ) -> Self {
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
/// [`Scope::write`](crate::engine::Scope::write).
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct ScopedWrite<'s> {
    inner: LentRequest<'s>,
    _data: PhantomData<&'s [u8]>,
}

impl<'s> ScopedWrite<'s> {
    pub(in crate::engine) fn new(mem: &'s Memory, scope: u64, addr: u64, data: &'s [u8]) -> Self {
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
