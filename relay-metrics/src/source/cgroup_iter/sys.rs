//! The raw `bpf(2)` and `mmap(2)` calls of the cgroup iterator. aya 0.14's `Iter::attach`
//! passes no iterator parameters, and a cgroup iterator needs them (which cgroup, which walk
//! order), so the link is created here with `bpf(BPF_LINK_CREATE)` directly.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

pub(super) use crate::source::task_iter::iter_create;
use crate::source::task_iter::{bpf_fd, BPF_LINK_CREATE, BPF_TRACE_ITER};

/// `enum bpf_cgroup_iter_order`: the cgroup and its descendants, parents first.
const BPF_CGROUP_ITER_DESCENDANTS_PRE: u32 = 2;

/// `bpf(BPF_LINK_CREATE)` of an iterator program with `union bpf_iter_link_info.cgroup`:
/// `cgroup`'s hierarchy, walked from it in pre-order.
pub(super) fn link_create(program: BorrowedFd<'_>, cgroup: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // union bpf_iter_link_info's cgroup member: order (u32), cgroup_fd (u32), cgroup_id (u64,
    // 0: use the fd). 16 bytes, the size of the whole union.
    let mut info = [0u32; 4];
    info[0] = BPF_CGROUP_ITER_DESCENDANTS_PRE;
    info[1] = u32::try_from(cgroup.as_raw_fd()).map_err(io::Error::other)?;
    let pointer = info.as_ptr() as u64;
    // union bpf_attr's link_create: prog_fd, target_fd, attach_type, flags, then iter_info (a
    // 64-bit pointer) and iter_info_len.
    let mut attr = [0u32; 16];
    attr[0] = u32::try_from(program.as_raw_fd()).map_err(io::Error::other)?;
    attr[2] = BPF_TRACE_ITER;
    // The pointer's low then high half (little- and big-endian hosts alike keep the u64 in
    // native order in the attribute).
    let halves = pointer.to_ne_bytes();
    attr[4] = u32::from_ne_bytes([halves[0], halves[1], halves[2], halves[3]]);
    attr[5] = u32::from_ne_bytes([halves[4], halves[5], halves[6], halves[7]]);
    attr[6] = u32::try_from(std::mem::size_of_val(&info)).map_err(io::Error::other)?;
    // `info` lives to the end of this function, past the call that reads it through `pointer`.
    bpf_fd(BPF_LINK_CREATE, &mut attr)
}

/// A read-only shared mapping of an mmap-able BPF array map (`BPF_F_MMAPABLE`): its values,
/// back to back, as the program last wrote them.
#[derive(Debug)]
pub(super) struct Mapping {
    address: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; nothing in it is tied to a
// thread.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of the map `map`.
    pub(super) fn new(map: BorrowedFd<'_>, len: usize) -> io::Result<Self> {
        // SAFETY: a fresh mapping chosen by the kernel (no fixed address), read-only; the
        // kernel checks `len` against the map's size and fails rather than map beyond it.
        let address = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if address == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let address = std::ptr::NonNull::new(address.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null address"))?;
        Ok(Self { address, len })
    }

    /// The mapped bytes. The program writes them only during a walk, which runs inside this
    /// process's `read()` of the iterator: between reads they do not change.
    pub(super) fn bytes(&self) -> &[u8] {
        // SAFETY: `address` is a live mapping of `len` readable bytes until `drop`; the only
        // writer is the program, which runs only while this process reads the iterator (the
        // link is ours and `CgroupIter::read` takes `&mut self`), never during this borrow.
        unsafe { std::slice::from_raw_parts(self.address.as_ptr(), self.len) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, once; no borrow of it outlives
        // `self`.
        unsafe {
            libc::munmap(self.address.as_ptr().cast(), self.len);
        }
    }
}
