//! One `statfs(2)` in a helper process: the one home of every call that can block
//! uninterruptibly on a mount.
//!
//! A filesystem that never answers (an NFS server gone, a FUSE daemon that reads a request and
//! never replies) leaves its caller waiting in the kernel, and past the daemon's read not even
//! SIGKILL ends that wait. On a thread of ours it would keep the whole process from finishing
//! its exit; in a helper process it keeps only that helper. So each call runs in a child forked
//! for it, which answers through a socket pair and exits. A child with no answer by the deadline
//! is killed and abandoned: we never wait for it, and only look (without blocking) whether its
//! call has returned, which closes its end of the socket.
//!
//! The child is a bare `clone(SIGCHLD)`, not `fork(3)`: `fork(3)` would run every `atfork`
//! handler of the process (a Python process may hold libraries whose handlers stop and restart
//! their thread pools), and the child needs none of them. Forking a multi-threaded process is
//! sound when the child calls only async-signal-safe functions: it moves its socket to fd 0,
//! closes every other descriptor (so that a stuck child holds no pipe, socket or listener of
//! ours, such as the stdout a caller reads to its end), asks to be killed with the thread that
//! forked it, calls `statfs`, writes the numbers and `_exit`s. Its memory is a copy-on-write
//! view of ours; a stuck child keeps that view until its call returns.

use std::ffi::CStr;
use std::io::{self, Read as _};
use std::os::fd::{AsRawFd as _, RawFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

use super::StatvfsBlocks;

/// The child's answer: errno (0 on success), then `f_frsize`, `f_bsize`, `f_blocks`,
/// `f_bavail`, `f_bfree`.
const ANSWER_WORDS: usize = 6;
const ANSWER_BYTES: usize = ANSWER_WORDS * size_of::<u64>();

/// A helper process asked for one path.
#[derive(Debug)]
pub(super) struct Helper {
    pid: Pid,
    answer: UnixStream,
}

/// A helper that gave no answer in time: killed, not waited for.
#[derive(Debug)]
pub(super) struct Abandoned {
    pid: Pid,
    answer: UnixStream,
    /// When its call was made.
    pub(super) since: Instant,
}

impl Helper {
    /// Starts a helper that calls `statfs(path)`.
    pub(super) fn start(path: &CStr) -> io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        // Beyond a few thousand descriptors the child's fallback close loop (kernels before 5.9
        // have no close_range) would take a while; the limit is read here, not in the child.
        let max_fd = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft)
            .min(1 << 16);
        let max_fd = RawFd::try_from(max_fd).unwrap_or(1024);
        // SAFETY: a raw `clone` with only SIGCHLD as its exit signal and no new stack is a fork
        // without the atfork handlers. In the child, `child_statfs` calls async-signal-safe
        // system calls only and never returns.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::c_long::from(libc::SIGCHLD),
                0,
                0,
                0,
                0,
            )
        };
        if pid == 0 {
            child_statfs(path, theirs.as_raw_fd(), max_fd);
        }
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        drop(theirs);
        let pid = i32::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
        Ok(Self {
            pid: Pid::from_raw(pid),
            answer: ours,
        })
    }

    /// The helper's answer, if it comes before `deadline`; otherwise the helper is killed and
    /// handed back to be watched. `since` is when it was started.
    pub(super) fn answer(
        mut self,
        since: Instant,
        deadline: Instant,
    ) -> Result<Result<StatvfsBlocks, String>, Abandoned> {
        let mut bytes = [0_u8; ANSWER_BYTES];
        // Answers are collected one after another, oldest first: past the deadline, an answer
        // already sent is still taken (the 1 ms floor; a zero timeout means none).
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let read = self
            .answer
            .set_read_timeout(Some(left))
            .and_then(|()| self.answer.read_exact(&mut bytes));
        match read {
            Ok(()) => {
                // It exits right after its answer: this wait is short.
                let _ = waitpid(self.pid, None);
                Ok(decode(&bytes))
            }
            Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
                let _ = waitpid(self.pid, None);
                Ok(Err(
                    "the statfs helper process exited without an answer".into()
                ))
            }
            Err(_) => {
                // SIGKILL ends the wait at once while the filesystem has not yet taken the
                // request; after that, only the filesystem's answer (or abort) does.
                let _ = kill(self.pid, Signal::SIGKILL);
                Err(Abandoned {
                    pid: self.pid,
                    answer: self.answer,
                    since,
                })
            }
        }
    }
}

impl Abandoned {
    /// The helper's process id.
    pub(super) fn pid(&self) -> i32 {
        self.pid.as_raw()
    }

    /// Whether its call has returned (never blocks on the helper while it is stuck). Once it
    /// has, the helper is reaped and the path may be asked again.
    pub(super) fn has_returned(&mut self) -> bool {
        let mut late_answer = [0_u8; ANSWER_BYTES];
        let returned = match self
            .answer
            .set_nonblocking(true)
            .and_then(|()| self.answer.read(&mut late_answer))
        {
            // An answer or end of file: the call returned and the helper is exiting.
            Ok(_) => true,
            Err(error) => error.kind() != io::ErrorKind::WouldBlock,
        };
        if returned {
            // Past the call: exiting takes no filesystem wait. ECHILD (reaped elsewhere, or
            // SIGCHLD ignored) is fine too.
            let _ = waitpid(self.pid, None);
        }
        returned
    }

    /// Reaps the helper if it has exited already; never waits (for the owner's shutdown).
    pub(super) fn reap_if_exited(&self) {
        let _ = waitpid(self.pid, Some(WaitPidFlag::WNOHANG));
    }
}

fn decode(bytes: &[u8; ANSWER_BYTES]) -> Result<StatvfsBlocks, String> {
    let mut words = [0_u64; ANSWER_WORDS];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(size_of::<u64>())) {
        let mut array = [0_u8; size_of::<u64>()];
        array.copy_from_slice(chunk);
        *word = u64::from_ne_bytes(array);
    }
    let [errno, fragment_size, block_size, blocks, blocks_available, blocks_free] = words;
    if errno != 0 {
        let errno = i32::try_from(errno).map_or(Errno::UnknownErrno, Errno::from_raw);
        return Err(errno.desc().to_owned());
    }
    Ok(StatvfsBlocks {
        fragment_size,
        block_size,
        blocks,
        blocks_available,
        blocks_free,
    })
}

/// The child: async-signal-safe calls only (no allocation, no lock, no panic), then `_exit`.
fn child_statfs(path: &CStr, socket: RawFd, max_fd: RawFd) -> ! {
    // SAFETY: each call is a plain system call on values owned by this (forked) process: the
    // socket moves to fd 0 and every other descriptor is closed; `statfs` writes into a local
    // buffer of its own type; `write` reads a local array; `_exit` ends the process without
    // running any of the parent's exit handlers.
    unsafe {
        if socket != 0 && libc::dup2(socket, 0) != 0 {
            libc::_exit(1);
        }
        if libc::syscall(libc::SYS_close_range, 1_u32, u32::MAX, 0_u32) != 0 {
            for fd in 1..max_fd {
                libc::close(fd);
            }
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let mut stat: libc::statfs = std::mem::zeroed();
        let words = if libc::statfs(path.as_ptr(), &raw mut stat) == 0 {
            [
                0,
                word(stat.f_frsize),
                word(stat.f_bsize),
                word(stat.f_blocks),
                word(stat.f_bavail),
                word(stat.f_bfree),
            ]
        } else {
            [word(Errno::last_raw()), 0, 0, 0, 0, 0]
        };
        let mut bytes = [0_u8; ANSWER_BYTES];
        for (chunk, word) in bytes.chunks_exact_mut(size_of::<u64>()).zip(words) {
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        libc::write(0, bytes.as_ptr().cast(), ANSWER_BYTES);
        libc::_exit(0)
    }
}

/// A `statfs` field or errno as a word of the answer: the fields are signed or unsigned by
/// architecture (none is negative), so one generic conversion serves them all.
fn word(value: impl TryInto<u64>) -> u64 {
    value.try_into().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_helper_answers_like_an_in_process_call() {
        let path = c"/";
        let started = Instant::now();
        let answer = Helper::start(path)
            .unwrap()
            .answer(started, started + Duration::from_secs(5))
            .unwrap()
            .unwrap();
        let stat = nix::sys::statvfs::statvfs("/").unwrap();
        assert_eq!(answer.blocks, stat.blocks());
        assert!(answer.fragment_size > 0);
    }

    #[test]
    fn a_failing_call_comes_back_as_its_errno() {
        let started = Instant::now();
        let answer = Helper::start(c"/relay-metrics-no-such-path")
            .unwrap()
            .answer(started, started + Duration::from_secs(5))
            .unwrap();
        assert_eq!(answer, Err(Errno::ENOENT.desc().to_owned()));
    }
}
