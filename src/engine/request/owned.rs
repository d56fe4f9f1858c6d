//! Reads and writes of owned buffers: the buffer moves into the engine,
//! the device uses it in place, and it comes back with the result.

use super::*;

/// A read or write through a buffer that moves into the engine and back:
/// what [`ReadOwned`] and [`WriteOwned`] are.
#[derive(Debug)]
pub(super) struct OwnedRequest<'m> {
    req: Request<'m>,
    kind: Kind,
    addr: u64,
    /// The buffer, until the request is sent.
    buf: Option<Vec<u8>>,
}

impl<'m> OwnedRequest<'m> {
    pub(in crate::engine) fn new(mem: &'m Memory, kind: Kind, addr: u64, buf: Vec<u8>) -> Self {
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
    pub(in crate::engine) fn new(mem: &'m Memory, addr: u64, buf: Vec<u8>) -> Self {
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

/// A write from a buffer the engine owns until it completes; see
/// [`Memory::write_from_owned`].
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct WriteOwned<'m>(OwnedRequest<'m>);

impl<'m> WriteOwned<'m> {
    pub(in crate::engine) fn new(mem: &'m Memory, addr: u64, data: Vec<u8>) -> Self {
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
