//! Descriptors across processes: `SCM_RIGHTS` over a Unix stream socket, and the kernel's
//! `fdinfo` of BPF objects (which program a link runs, a program's id and run statistics).

use std::io::{self, IoSlice, IoSliceMut, Read as _, Write as _};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use nix::errno::Errno;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};

/// The kernel accepts at most this many descriptors in one `SCM_RIGHTS` message (`SCM_MAX_FD`).
pub(super) const MAX_FDS: usize = 253;

/// The socket a parent put on this child's stdin: a duplicate of descriptor 0, ours to own.
/// A child started with `env` set but without that socket exits (status 2) saying so.
pub(crate) fn socket_on_stdin_or_exit(env: &str) -> UnixStream {
    let socket = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(UnixStream::from)
        .and_then(|socket| socket.local_addr().map(|_| socket));
    match socket {
        Ok(socket) => socket,
        Err(error) => {
            eprintln!("relay-metrics: {env} is set but stdin is not the parent's socket: {error}");
            std::process::exit(2);
        }
    }
}

/// Sends `data` (not empty: descriptors travel with data bytes) and `fds` in one go. The
/// receiver gets its own descriptors for the same open files; ours stay open.
pub(crate) fn send(socket: &UnixStream, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if data.is_empty() || fds.len() > MAX_FDS {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let iov = [IoSlice::new(data)];
    let rights = [ControlMessage::ScmRights(fds)];
    let control: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    let sent = loop {
        match sendmsg::<()>(
            socket.as_raw_fd(),
            &iov,
            control,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(sent) => break sent,
            Err(Errno::EINTR) => continue,
            Err(errno) => return Err(errno.into()),
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
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
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
        let mut iov = [IoSliceMut::new(&mut chunk)];
        // Dropping the buffer closes any descriptor not taken out of it.
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received =
            match rustix::net::recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
                Ok(received) => received,
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => continue,
                Err(errno) => return Err(errno.into()),
            };
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        if received.flags.contains(ReturnFlags::CTRUNC) {
            // The kernel closed the descriptors that did not fit: the set is incomplete.
            return Err(io::Error::other("descriptors were truncated (MSG_CTRUNC)"));
        }
        if received.bytes == 0 {
            return Ok((data, fds));
        }
        data.extend_from_slice(&chunk[..received.bytes.min(chunk.len())]);
        if data.len() > max_bytes {
            return Err(io::Error::other(format!(
                "more than {max_bytes} bytes from the loader"
            )));
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
            let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).expect("F_GETFD");
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
