//! Descriptors across processes: `SCM_RIGHTS` over a Unix stream socket, and the kernel's
//! `fdinfo` of BPF objects (which program a link runs, a program's id and run statistics).

use std::io::{self, Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

/// The kernel accepts at most this many descriptors in one `SCM_RIGHTS` message (`SCM_MAX_FD`).
pub(super) const MAX_FDS: usize = 253;

const FD_BYTES: usize = std::mem::size_of::<RawFd>();

/// `CMSG_SPACE` for `count` descriptors, as u64 words (the control buffer must be aligned for
/// `cmsghdr`, which a `Vec<u8>` is not).
fn control_words(count: usize) -> Vec<u64> {
    // SAFETY: CMSG_SPACE only computes a size.
    let bytes = unsafe { libc::CMSG_SPACE((count * FD_BYTES) as u32) } as usize;
    vec![0u64; bytes.div_ceil(8)]
}

/// Sends `data` (not empty: descriptors travel with data bytes) and `fds` in one go. The
/// receiver gets its own descriptors for the same open files; ours stay open.
pub(crate) fn send(socket: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if data.is_empty() || fds.len() > MAX_FDS {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut control = control_words(fds.len());
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() * 8;
        // SAFETY: msg_control points to a zeroed, aligned buffer of at least CMSG_SPACE(fds)
        // bytes, so CMSG_FIRSTHDR is non-null and CMSG_DATA has room for every descriptor.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN((fds.len() * FD_BYTES) as u32) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(header),
                fds.len() * FD_BYTES,
            );
        }
    }
    let sent = loop {
        // SAFETY: msg and the buffers it points to live across the call.
        let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            break sent as usize;
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    };
    // The descriptors went with the first byte; a stream socket may take the rest separately.
    let mut rest = socket;
    rest.write_all(&data[sent..])
}

/// Reads until the peer closes its end, at most `max_bytes` and until `deadline` (then
/// `TimedOut`), and takes every descriptor that came along (close-on-exec, owned).
pub(crate) fn receive_all(
    socket: &UnixStream,
    max_bytes: usize,
    deadline: Instant,
) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut data = Vec::new();
    let mut fds = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut control = control_words(MAX_FDS);
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no complete handover in time",
            ));
        }
        // SO_RCVTIMEO: recvmsg below fails with EAGAIN once it passes.
        socket.set_read_timeout(Some(remaining))?;
        let mut iov = libc::iovec {
            iov_base: chunk.as_mut_ptr().cast(),
            iov_len: chunk.len(),
        };
        // SAFETY: an all-zero msghdr is a valid empty message.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = control.len() * 8;
        // SAFETY: msg points to live buffers of the lengths it states.
        let received =
            unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if received < 0 {
            let error = io::Error::last_os_error();
            match error.kind() {
                io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => continue,
                _ => return Err(error),
            }
        }
        take_descriptors(&msg, &mut fds);
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            // The kernel closed the descriptors that did not fit: the set is incomplete.
            return Err(io::Error::other("descriptors were truncated (MSG_CTRUNC)"));
        }
        if received == 0 {
            return Ok((data, fds));
        }
        data.extend_from_slice(&chunk[..received as usize]);
        if data.len() > max_bytes {
            return Err(io::Error::other(format!(
                "more than {max_bytes} bytes from the loader"
            )));
        }
    }
}

/// Moves the `SCM_RIGHTS` descriptors of a received message into `fds`.
fn take_descriptors(msg: &libc::msghdr, fds: &mut Vec<OwnedFd>) {
    // SAFETY: msg was filled by recvmsg; the CMSG_* macros stay within msg_controllen, and each
    // SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors now owned by this
    // process (read unaligned: CMSG_DATA need not be aligned for RawFd).
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let payload = (*header).cmsg_len - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header);
                for i in 0..payload / FD_BYTES {
                    let fd = std::ptr::read_unaligned(data.add(i * FD_BYTES).cast::<RawFd>());
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            header = libc::CMSG_NXTHDR(msg, header);
        }
    }
}

/// The value of `key:` in fdinfo text, as a number.
fn field(fdinfo: &[u8], key: &str) -> Option<u64> {
    let text = std::str::from_utf8(fdinfo).ok()?;
    text.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        value.trim().parse().ok()
    })
}

/// The program a BPF link runs, from the link's fdinfo (`None` for anything but a link).
pub fn link_program_id(fdinfo: &[u8]) -> Option<u32> {
    field(fdinfo, "link_id")?;
    u32::try_from(field(fdinfo, "prog_id")?).ok()
}

/// A program's id, run time (ns) and run count from its fdinfo (`None` for anything but a
/// program; the counters advance only while `kernel.bpf_stats_enabled` is on).
pub fn program_stats(fdinfo: &[u8]) -> Option<(u32, u64, u64)> {
    field(fdinfo, "prog_type")?;
    let id = u32::try_from(field(fdinfo, "prog_id")?).ok()?;
    Some((
        id,
        field(fdinfo, "run_time_ns").unwrap_or(0),
        field(fdinfo, "run_cnt").unwrap_or(0),
    ))
}

/// Reads a whole small file (fdinfo) into `buf`.
pub(super) fn read_small(path: &std::path::Path, buf: &mut Vec<u8>) -> io::Result<()> {
    buf.clear();
    std::fs::File::open(path)?.read_to_end(buf)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured on the dev machine (Linux 6.18) from /proc/<pid>/fdinfo of a `relay-metrics watch`
    // holding the descriptors its loader child handed over.
    const LINK: &[u8] = b"pos:\t0\nflags:\t02000000\nmnt_id:\t17\nino:\t1038\nlink_type:\tperf\nlink_id:\t9601\nprog_tag:\t7f86dc2036b59bc2\nprog_id:\t11736\ntp_name:\ttask_newtask\nevent_type:\ttracepoint\ncookie:\t0\n";
    const PROGRAM: &[u8] = b"pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t1038\nprog_type:\t5\nprog_jited:\t1\nprog_tag:\t7f86dc2036b59bc2\nmemlock:\t4096\nprog_id:\t11736\nrun_time_ns:\t1234\nrun_cnt:\t7\nrecursion_misses:\t0\nverified_insns:\t468\n";
    const MAP: &[u8] = b"pos:\t0\nflags:\t02000002\nmnt_id:\t17\nino:\t1038\nmap_type:\t2\nkey_size:\t4\nvalue_size:\t56\nmax_entries:\t1\nmap_flags:\t0x0\nmap_extra:\t0x0\nmemlock:\t368\nmap_id:\t10418\nfrozen:\t0\n";

    #[test]
    fn tells_links_programs_and_maps_apart() {
        assert_eq!(link_program_id(LINK), Some(11736));
        assert_eq!(link_program_id(PROGRAM), None);
        assert_eq!(link_program_id(MAP), None);
        // run_time_ns/run_cnt edited from 0 (BPF stats were off).
        assert_eq!(program_stats(PROGRAM), Some((11736, 1234, 7)));
        assert_eq!(program_stats(LINK), None);
        assert_eq!(program_stats(MAP), None);
        assert_eq!(program_stats(b"prog_type:\t5\nprog_id:\tx\n"), None);
        assert_eq!(link_program_id(b"\xff\xfe"), None);
    }

    fn soon() -> Instant {
        Instant::now() + std::time::Duration::from_secs(10)
    }

    #[test]
    fn a_silent_peer_times_out_at_the_deadline() {
        let (_left, right) = UnixStream::pair().expect("socketpair");
        let started = Instant::now();
        let deadline = started + std::time::Duration::from_millis(200);
        let error = receive_all(&right, 1000, deadline).expect_err("nothing comes");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        let waited = started.elapsed();
        assert!(
            waited >= std::time::Duration::from_millis(200),
            "{waited:?}"
        );
        assert!(waited < std::time::Duration::from_secs(5), "{waited:?}");
    }

    #[test]
    fn descriptors_and_data_cross_a_socket() {
        let (left, right) = UnixStream::pair().expect("socketpair");
        let file = tempfile::tempfile().expect("tempfile");
        let mut data = vec![b'x'; 300 * 1024];
        data[0] = b'{';
        let sender = std::thread::spawn(move || {
            send(&left, &data, &[file.as_raw_fd(), file.as_raw_fd()]).expect("send");
            drop(left);
            data
        });
        let (received, fds) = receive_all(&right, 1 << 20, soon()).expect("receive");
        let data = sender.join().expect("sender");
        assert_eq!(received, data);
        assert_eq!(fds.len(), 2);
        for fd in &fds {
            assert_ne!(fd.as_raw_fd(), -1);
            // SAFETY: F_GETFD on an owned descriptor.
            let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        }
        assert!(send(&right, b"", &[]).is_err());
    }

    #[test]
    fn an_oversized_stream_is_refused() {
        let (left, right) = UnixStream::pair().expect("socketpair");
        let sender = std::thread::spawn(move || {
            let _ = send(&left, &[1u8; 4096], &[]);
        });
        let error = receive_all(&right, 1000, soon()).expect_err("over the limit");
        assert!(error.to_string().contains("1000"), "{error}");
        drop(right);
        sender.join().expect("sender");
    }
}
