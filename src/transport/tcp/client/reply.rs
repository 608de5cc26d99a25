//! The receiving half of a lane: reads replies in the order requests were sent and finishes
//! their slices.

use super::*;

enum ReplyError {
    Rejected,
    /// A validate-only request on GPU memory: re-send it over the socket.
    NotSameHost,
    /// The local side failed (GPU copy); the payload was consumed, the stream is fine.
    Local(crate::error::Error),
    /// The kernel refused the same-host copy: fall back to TCP.
    VmRefused(std::io::Error),
    Protocol(String),
    Io(std::io::Error),
}

pub(super) fn receiver_loop(sh: &Shared, lane: usize, expect: &Receiver<Expect>) {
    let mut stream: Option<(Arc<TcpStream>, u64)> = None;
    let mut broken = true;
    // A request on the current stream was rejected, or the stream broke and its oldest
    // unanswered request was charged for it: a Mooncake server closes the stream after any
    // rejection (ours after a rejected WRITE), and processes requests in order, so requests
    // behind that point were never executed and are re-sent without using their one retry.
    // Each rejection is final and each broken stream charges one retry, so this is bounded.
    let mut after_reject = false;
    let mut rb = RecvBuf::new(256 << 10);
    // The read timeout set on the current stream (lowered to each slice's remaining deadline).
    let base_timeout = sh.cfg.io_timeout.min(sh.cfg.transfer_timeout);
    let mut read_timeout = base_timeout;
    while let Ok(msg) = expect.recv() {
        let (slice, vm) = match msg {
            Expect::Conn(s, generation) => {
                stream = Some((s, generation));
                broken = false;
                after_reject = false;
                rb = RecvBuf::new(256 << 10);
                read_timeout = base_timeout;
                continue;
            }
            Expect::Reply(s, vm) => (s, vm),
            Expect::Stop => break,
        };
        let _credit = CreditBack(&sh.credit[lane], slice.len);
        let Some((st, generation)) = stream.as_ref().filter(|_| !broken) else {
            if after_reject {
                sh.resend(slice);
            } else {
                sh.fail_or_retry(slice, ErrorKind::Socket, true);
            }
            continue;
        };
        let end_stream = || {
            // Release pairs with the sender's Acquire load: it reconnects only if this is still
            // its current connection.
            sh.broken[lane].store(*generation, Ordering::Release);
            let _ = st.shutdown(Shutdown::Both);
        };
        // Wait for this reply no longer than its slice's deadline.
        let left = slice.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            broken = true;
            end_stream();
            slice.done.finish(Err(ErrorKind::Timeout));
            continue;
        }
        let want = base_timeout.min(left);
        if want < read_timeout || want > read_timeout + read_timeout / 16 {
            let _ = st.set_read_timeout(Some(want.max(Duration::from_millis(1))));
            read_timeout = want;
        }
        let vm_pid = if vm { sh.addr.vm_pid } else { 0 };
        match read_reply(sh.addr.v2, vm_pid, st, &mut rb, &slice) {
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
                after_reject = true;
                if slice.op == Opcode::Write {
                    // The payload that follows cannot be skipped: the stream is over.
                    broken = true;
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
                broken = true;
                end_stream();
                slice.done.finish(Err(ErrorKind::Protocol));
            }
            Err(ReplyError::Io(e)) => {
                let timed_out = matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                );
                broken = true;
                end_stream();
                if timed_out {
                    tw_log!(
                        Level::Warn,
                        "tcp: {}:{} did not answer in time",
                        sh.addr.host,
                        sh.addr.port
                    );
                    slice.done.finish(Err(ErrorKind::Timeout));
                } else if after_reject {
                    sh.resend(slice);
                } else {
                    tw_log!(
                        Level::Warn,
                        "tcp: connection to {}:{} lost: {e}",
                        sh.addr.host,
                        sh.addr.port
                    );
                    // This slice is charged; the ones behind it were never executed.
                    after_reject = true;
                    sh.fail_or_retry(slice, ErrorKind::Socket, true);
                }
            }
        }
    }
}

fn read_reply(
    v2: bool,
    vm_pid: u32,
    stream: &TcpStream,
    rb: &mut RecvBuf,
    s: &Slice,
) -> Result<(), ReplyError> {
    let mut r = stream;
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
    if vm_pid != 0 {
        // The owner validated the range; move the bytes with one kernel copy.
        let read = s.op == Opcode::Read;
        return match samehost::vm_copy(vm_pid, read, s.local, s.remote, s.len as usize) {
            Ok(()) => Ok(()),
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
