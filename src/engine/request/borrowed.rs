//! Reads and writes of borrowed buffers: a read's buffer is filled by its
//! future's own poll, from the request's engine buffer; a write's bytes
//! are copied into the engine when it is queued. So a future dropped or
//! leaked leaves no pointer to the caller's buffer behind.

use super::*;

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
    pub(in crate::engine) fn new(mem: &'m Memory, addr: u64, buf: &'b mut [u8]) -> Self {
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
    pub(in crate::engine) fn new(mem: &'m Memory, addr: u64) -> Self {
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
    pub(in crate::engine) fn new(mem: &'m Memory, addr: u64, data: &'b [u8]) -> Self {
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
