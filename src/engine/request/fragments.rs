//! A read or write as a stream of page pieces, each with its own result.

use super::*;

/// The buffer behind a [`Fragments`] stream.
#[derive(Debug)]
pub(super) enum FragmentBuffer<'b> {
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
    pub(in crate::engine) fn read(mem: &'m Memory, addr: u64, buf: &'b mut [u8]) -> Self {
        Fragments {
            req: Request::new(mem),
            addr,
            buf: FragmentBuffer::Read(buf),
            next: 0,
        }
    }

    pub(in crate::engine) fn write(mem: &'m Memory, addr: u64, data: &'b [u8]) -> Self {
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
