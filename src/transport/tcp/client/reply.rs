//! The receiving half of a lane: reads replies in the order requests were sent and finishes
//! their slices.

use super::*;
use std::os::fd::RawFd;

enum ReplyError {
    Rejected,
    /// A validate-only request on GPU memory: re-send it over the socket.
    NotSameHost,
    /// The local side failed (GPU copy); the payload was consumed, the stream is fine.
    Local(crate::error::Error),
    /// The kernel refused the same-host copy: fall back to TCP.
    VmRefused(std::io::Error),
    /// The approval came (or a long copy ran) past its window: re-validate.
    VmExpired,
    Protocol(String),
    Io(std::io::Error),
}

/// The receiving half of a lane: the connection replies come on and the buffer they are read
/// through. Its lock is held while replies are read, by the lane's receiver thread or by a
/// submitting thread that sent on an idle lane and reads its own replies (inline round trip).
pub(super) struct LaneRx {
    /// Current stream and its generation.
    stream: Option<(Arc<TcpStream>, u64)>,
    broken: bool,
    /// A request on the current stream was rejected, or the stream broke and its oldest
    /// unanswered request was charged for it: a Mooncake server closes the stream after any
    /// rejection (ours after a rejected WRITE), and processes requests in order, so requests
    /// behind that point were never executed and are re-sent without using their one retry.
    /// Each rejection is final and each broken stream charges one retry, so this is bounded.
    after_reject: bool,
    rb: RecvBuf,
    /// The read timeout set on the current stream (lowered to each slice's remaining deadline).
    read_timeout: Duration,
    /// The socket was seen readable since the last reply was handled.
    readable: bool,
}

impl LaneRx {
    pub(super) fn new(base_timeout: Duration) -> LaneRx {
        LaneRx {
            stream: None,
            broken: true,
            after_reject: false,
            rb: RecvBuf::new(256 << 10),
            read_timeout: base_timeout,
            readable: false,
        }
    }

    /// `None` when the next reply can be handled now (bytes are buffered, the socket was seen
    /// readable, or the stream is gone); otherwise the socket to wait on.
    pub(super) fn poll_fd(&mut self) -> Option<RawFd> {
        let (st, _) = self.stream.as_ref().filter(|_| !self.broken)?;
        if self.rb.available() > 0 || std::mem::take(&mut self.readable) {
            return None;
        }
        Some(st.as_raw_fd())
    }

    /// The socket was seen readable: the next reply has begun to arrive.
    pub(super) fn mark_readable(&mut self) {
        self.readable = true;
    }
}

pub(super) fn receiver_loop(sh: &Shared, lane: usize, expect: &Receiver<Expect>) {
    while let Ok(msg) = expect.recv() {
        let mut rx = sh.lane_rx(lane);
        let stop = match msg {
            Expect::Conn(s, generation) => {
                rx.stream = Some((s, generation));
                rx.broken = false;
                rx.after_reject = false;
                rx.readable = false;
                rx.rb = RecvBuf::new(256 << 10);
                rx.read_timeout = sh.base_read_timeout();
                false
            }
            Expect::Reply(s, vm) => {
                handle_reply(sh, lane, &mut rx, s, vm);
                // "Copy done" frames ride on the lane's next send while work keeps coming;
                // every 32 approvals they go out at once, otherwise shortly (the flusher).
                if vm.is_some() {
                    if sh.owed_count(lane) >= 32 {
                        sh.flush_done_if_free(lane);
                    }
                    sh.arm_done_flush();
                }
                false
            }
            Expect::Stop => true,
        };
        // Release (under the lock): a submitting thread that sees the count at zero finds every
        // effect of this message in `rx`.
        sh.expected[lane].fetch_sub(1, Ordering::Release);
        drop(rx);
        if stop {
            break;
        }
    }
}

/// Reads the reply for `slice` on the lane's current stream and finishes it.
pub(super) fn handle_reply(sh: &Shared, lane: usize, rx: &mut LaneRx, slice: Slice, vm: VmSent) {
    let _credit = CreditBack(&sh.credit[lane], slice.len);
    let LaneRx {
        stream,
        broken,
        after_reject,
        rb,
        read_timeout,
        readable,
    } = rx;
    *readable = false;
    let Some((st, generation)) = stream.as_ref().filter(|_| !*broken) else {
        if *after_reject {
            sh.resend(slice);
        } else {
            sh.fail_or_retry(slice, ErrorKind::Socket, true);
        }
        return;
    };
    let end_stream = || {
        // Release pairs with the sender's Acquire load: it reconnects only if this is still
        // its current connection.
        sh.broken[lane].store(*generation, Ordering::Release);
        let _ = st.shutdown(Shutdown::Both);
    };
    // Wait for this reply no longer than its slice's deadline. A reply already whole in the
    // buffer needs no wait, nor the clock (one read per reply was a tenth of a scatter READ's
    // time).
    if !reply_buffered(sh.addr.v2, vm.is_some(), rb, &slice) {
        let left = slice.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            *broken = true;
            end_stream();
            slice.done.finish(Err(ErrorKind::Timeout));
            return;
        }
        let want = sh.base_read_timeout().min(left);
        if want < *read_timeout || want > *read_timeout + *read_timeout / 16 {
            let _ = st.set_read_timeout(Some(want.max(Duration::from_millis(1))));
            *read_timeout = want;
        }
    }
    let vm = vm.map(|sent| (sh.addr.vm_pid, sent));
    let mut approved = false;
    let result = read_reply(sh.addr.v2, vm, st, rb, &slice, &mut approved);
    if approved {
        // The copy is over (done, refused or given up): the server may let `unregister` go.
        sh.owe_done(lane, *generation);
    }
    match result {
        Ok(()) => {
            let n = slice.len;
            slice.done.finish(Ok(n));
        }
        Err(ReplyError::VmRefused(e)) => {
            tw_log!(
                Level::Warn,
                "same-host path to pid {} refused ({e}); using TCP",
                sh.addr.vm_pid
            );
            sh.vm_on.store(false, Ordering::Relaxed);
            sh.resend(slice);
        }
        Err(ReplyError::VmExpired) => {
            tw_log!(
                Level::Debug,
                "same-host approval for {:#x}+{} expired; re-validating",
                slice.remote,
                slice.len
            );
            sh.resend(slice);
        }
        Err(ReplyError::NotSameHost) => {
            let mut slice = slice;
            slice.no_vm = true;
            sh.resend(slice);
        }
        Err(ReplyError::Local(e)) => {
            tw_log!(Level::Error, "tcp: staging into GPU memory failed: {e}");
            slice.done.finish(Err(e.kind()));
        }
        Err(ReplyError::Rejected) => {
            tw_log!(
                Level::Warn,
                "tcp: {}:{} rejected {:#x}+{}",
                sh.addr.host,
                sh.addr.port,
                slice.remote,
                slice.len
            );
            *after_reject = true;
            if slice.op == Opcode::Write {
                // The payload that follows cannot be skipped: the stream is over.
                *broken = true;
                end_stream();
            }
            slice.done.finish(Err(ErrorKind::Rejected));
        }
        Err(ReplyError::Protocol(m)) => {
            tw_log!(
                Level::Error,
                "tcp: protocol error from {}:{}: {m}",
                sh.addr.host,
                sh.addr.port
            );
            *broken = true;
            end_stream();
            slice.done.finish(Err(ErrorKind::Protocol));
        }
        Err(ReplyError::Io(e)) => {
            let timed_out = matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            );
            *broken = true;
            end_stream();
            if timed_out {
                tw_log!(
                    Level::Warn,
                    "tcp: {}:{} did not answer in time",
                    sh.addr.host,
                    sh.addr.port
                );
                slice.done.finish(Err(ErrorKind::Timeout));
            } else if *after_reject {
                sh.resend(slice);
            } else {
                tw_log!(
                    Level::Warn,
                    "tcp: connection to {}:{} lost: {e}",
                    sh.addr.host,
                    sh.addr.port
                );
                // This slice is charged; the ones behind it were never executed.
                *after_reject = true;
                sh.fail_or_retry(slice, ErrorKind::Socket, true);
            }
        }
    }
}

/// Whether the whole reply to `s` is already in `rb` (a v2 status frame, then a READ's payload
/// when it is small enough to come through the buffer), so reading it cannot block. Same-host
/// replies are never counted as whole: their copy follows.
fn reply_buffered(v2: bool, same_host: bool, rb: &RecvBuf, s: &Slice) -> bool {
    let frame = if v2 { STATUS_LEN } else { 0 };
    let need = match s.op {
        _ if same_host => return false,
        Opcode::Read if s.len >= DIRECT_PAYLOAD => return false,
        Opcode::Read => frame + s.len as usize,
        Opcode::Write => frame,
    };
    need > 0 && rb.available() >= need
}

/// Reads one reply. `vm`: (peer pid, when the request was sent) for a validate-only request;
/// `approved` is set once the server approved it (a "copy done" is then owed, whatever follows).
fn read_reply(
    v2: bool,
    vm: Option<(u32, Instant)>,
    stream: &TcpStream,
    rb: &mut RecvBuf,
    s: &Slice,
    approved: &mut bool,
) -> Result<(), ReplyError> {
    let vm_pid = vm.map_or(0, |(pid, _)| pid);
    let mut r = crate::transport::tcp::net::SpinRead(stream);
    if v2 {
        // Before a large READ payload read only the status frame, so that the payload goes
        // straight into its destination instead of through the buffer (one copy, not two).
        let filled = if s.op == Opcode::Read && s.len >= DIRECT_PAYLOAD {
            rb.fill_exact(&mut r, STATUS_LEN)
        } else {
            rb.fill(&mut r, STATUS_LEN)
        };
        if !filled.map_err(ReplyError::Io)? {
            return Err(ReplyError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "peer closed the connection",
            )));
        }
        let frame: [u8; STATUS_LEN] = rb.take(STATUS_LEN).try_into().expect("8 bytes");
        match parse_status(&frame) {
            Some(STATUS_OK) => {}
            Some(STATUS_ADDR_REJECTED) => return Err(ReplyError::Rejected),
            Some(STATUS_NOT_SAME_HOST) if vm_pid != 0 => return Err(ReplyError::NotSameHost),
            Some(c) => return Err(ReplyError::Protocol(format!("unknown status code {c}"))),
            None => {
                return Err(ReplyError::Protocol(format!(
                    "bad status frame {frame:02x?}"
                )));
            }
        }
    }
    if let Some((pid, sent)) = vm {
        *approved = true;
        // The owner validated the range; move the bytes with kernel copies, only while the
        // approval is fresh (the owner's `unregister` waits for it at most `VM_LEASE`).
        let read = s.op == Opcode::Read;
        let until = sent + crate::memory::pins::VM_APPROVAL_WINDOW;
        return match samehost::vm_copy_until(pid, read, s.local, s.remote, s.len as usize, until) {
            Ok(true) => Ok(()),
            Ok(false) => Err(ReplyError::VmExpired),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::ESRCH | libc::ENOSYS)
                ) =>
            {
                Err(ReplyError::VmRefused(e))
            }
            Err(e) => Err(ReplyError::Protocol(format!("same-host copy failed: {e}"))),
        };
    }
    if let (Opcode::Read, Some(dev)) = (s.op, s.gpu) {
        use crate::transport::tcp::stage::{StageError, recv_to_device};
        return match recv_to_device(rb, &mut r, dev, s.local, s.len as usize) {
            Ok(()) => Ok(()),
            Err(StageError::Io(e)) => Err(ReplyError::Io(e)),
            Err(StageError::Cuda(e)) => Err(ReplyError::Local(e)),
        };
    }
    if s.op == Opcode::Read {
        // SAFETY: the local range was checked against the registry at submit time.
        let dst = unsafe { raw::bytes_mut(s.local, s.len as usize) };
        rb.read_into(&mut r, dst).map_err(ReplyError::Io)?;
    }
    Ok(())
}
