//! Same-host shortcuts between tidewire engines, negotiated through descriptor keys that
//! Mooncake ignores (`tw_pid`, `tw_host_id`, `tw_token`, `tw_token_addr`):
//!
//! - **In-process**: the peer engine lives in this process. Transfers check the range against the
//!   *owner's* registry (remote-accessible regions only, exactly as its TCP server would) and
//!   `memcpy`, with no socket at all. Only between engines with the same `auth_key` (both off,
//!   or equal), so the shortcut never lets a keyless engine past a keyed one's authentication.
//! - **Cross-process** (same boot id, other pid): the owner still validates every range (a
//!   header with [`VM_FLAG`](super::tcp::wire::VM_FLAG) over the usual lane, answered by a status
//!   frame and no payload), then the initiator moves the bytes with one
//!   `process_vm_readv`/`process_vm_writev` copy instead of two socket copies. Before use, the
//!   initiator reads a random token at a published address of the peer with `process_vm_readv`:
//!   a wrong process (pid namespaces) or a kernel that refuses cross-process access means plain
//!   TCP. A later refusal (`EPERM`) turns the shortcut off for that peer and re-sends over TCP.
//!
//! `unregister` is final on both paths: an in-process copy holds the owner's registry (shared)
//! while it runs; a cross-process approval is a lease the owner keeps until the initiator's
//! "copy done" frame, and the initiator copies only within a short window after its request
//! (see `memory::pins`). Threat model: this protects against honest peers racing `unregister`,
//! not against a hostile process of the same user, which can write our memory with
//! `process_vm_writev` whenever it likes; where such processes exist, turn `same_host` off or
//! run engines as different users.

use crate::auth::AuthKey;
use crate::log::Level;
use crate::memory::Registry;
use crate::metadata::SegmentDesc;
use crate::sync::LockClean;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, Weak};

/// This boot's id (`/proc/sys/kernel/random/boot_id`), empty if unreadable.
pub fn host_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    })
}

/// A random non-zero token.
pub fn new_token() -> u64 {
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_err()
    {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        b = (t.as_nanos() as u64 ^ ((std::process::id() as u64) << 32)).to_le_bytes();
    }
    u64::from_le_bytes(b) | 1
}

type Announced = HashMap<u64, (Weak<Registry>, AuthKey)>;

fn engines() -> &'static Mutex<Announced> {
    static MAP: OnceLock<Mutex<Announced>> = OnceLock::new();
    MAP.get_or_init(Mutex::default)
}

/// Makes an engine's registry findable by its token within this process, by engines holding
/// the same `key`.
pub fn announce(token: u64, registry: Weak<Registry>, key: AuthKey) {
    engines().lock_clean().insert(token, (registry, key));
}

/// Forgets an engine (on shutdown).
pub fn withdraw(token: u64) {
    engines().lock_clean().remove(&token);
}

/// The registry of an engine of this process with `token`, if it is still alive and holds the
/// same `key` as the caller.
pub fn find_in_process(token: u64, key: &AuthKey) -> Option<Weak<Registry>> {
    engines()
        .lock_clean()
        .get(&token)
        .filter(|(w, k)| w.strong_count() > 0 && k == key)
        .map(|(w, _)| w.clone())
}

/// Copies `len` bytes between our `local` and `remote` in process `pid`. `read` = remote → local.
/// Returns the OS error on refusal or a short copy.
pub fn vm_copy(pid: u32, read: bool, local: u64, remote: u64, len: usize) -> std::io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec {
            iov_base: (local as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let riov = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the local iovec lies in a range registered with this engine (checked at
        // submit); the remote one was validated by its owner. The kernel checks both and
        // reports EFAULT instead of touching unmapped memory.
        let n = unsafe {
            if read {
                libc::process_vm_readv(pid as libc::pid_t, &liov, 1, &riov, 1, 0)
            } else {
                libc::process_vm_writev(pid as libc::pid_t, &liov, 1, &riov, 1, 0)
            }
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "process_vm copy made no progress",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// Largest piece of one same-host copy: between pieces the approval's window is checked again.
const VM_CHUNK: usize = 4 << 20;

/// Like [`vm_copy`], in pieces of at most 4 MiB, each started only before `until` (the end of
/// the owner's approval window). `Ok(false)` when the window closed before the copy was done
/// (part of it may have been copied: the caller re-validates and copies again).
pub fn vm_copy_until(
    pid: u32,
    read: bool,
    local: u64,
    remote: u64,
    len: usize,
    until: std::time::Instant,
) -> std::io::Result<bool> {
    let mut done = 0usize;
    while done < len {
        if std::time::Instant::now() >= until {
            return Ok(false);
        }
        let k = (len - done).min(VM_CHUNK);
        vm_copy(pid, read, local + done as u64, remote + done as u64, k)?;
        done += k;
    }
    Ok(true)
}

/// Checks that `pid` is the process that published `token` at `token_addr`.
pub fn verify_peer(pid: u32, token: u64, token_addr: u64) -> std::io::Result<bool> {
    let mut got = 0u64;
    vm_copy(pid, true, &mut got as *mut u64 as u64, token_addr, 8)?;
    Ok(got == token)
}

/// Protocol revision that tidewire peers publish as `tw_version`. 2: the same-host path
/// reports finished copies ("copy done" frames); peers publishing 1 get plain TCP.
pub const TW_PROTOCOL_VERSION: u32 = 2;

/// Pid of a verified tidewire peer on this host, or 0 (plain TCP), with one log line why.
/// `enabled` is the `same_host` option.
pub fn verified_pid(desc: &SegmentDesc, enabled: bool) -> u32 {
    // Version 1 peers do not take "copy done" frames (their `unregister` would not wait for
    // our copies): plain TCP.
    if !enabled
        || desc.tw_version < 2
        || desc.tw_token == 0
        || desc.tw_pid == 0
        || desc.tw_host_id.is_empty()
        || desc.tw_host_id != host_id()
    {
        return 0;
    }
    match verify_peer(desc.tw_pid, desc.tw_token, desc.tw_token_addr) {
        Ok(true) => desc.tw_pid,
        Ok(false) => {
            tw_log!(
                Level::Info,
                "segment {}: pid {} is not the publishing engine (pid namespace?); using TCP",
                desc.name,
                desc.tw_pid
            );
            0
        }
        Err(e) => {
            tw_log!(
                Level::Info,
                "segment {}: same-host copy refused by the kernel ({e}); using TCP",
                desc.name
            );
            0
        }
    }
}
