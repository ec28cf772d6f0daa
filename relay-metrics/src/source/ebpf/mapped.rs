//! Read-only memory views of `BPF_F_MMAPABLE` array maps. A lookup costs one `bpf()` syscall
//! (~1 µs on our machines) per read; a mapped array is read with plain loads, which matters at
//! 1 kHz sampling, where the scope and machine-wide counters are read on every tick.

use std::marker::PhantomData;
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::ptr::NonNull;

use aya::maps::{MapData, MapError};
use aya::Pod;

/// `BPF_F_MMAPABLE` (include/uapi/linux/bpf.h).
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// One array map mapped read-only into this process.
pub(super) struct MappedArray<V> {
    base: NonNull<u8>,
    len_bytes: usize,
    /// Bytes between two entries: the kernel rounds an array's value size up to 8.
    stride: usize,
    entries: u32,
    _value: PhantomData<V>,
}

// SAFETY: the mapping is owned by this value alone, is never written through, and stays valid
// until `drop`; reading it from another thread is as sound as from this one.
unsafe impl<V: Pod> Send for MappedArray<V> {}
// SAFETY: as above; `get` only reads.
unsafe impl<V: Pod> Sync for MappedArray<V> {}

impl<V: Pod> MappedArray<V> {
    /// Maps `map`, which must be an array of `V` created with `BPF_F_MMAPABLE`; the error says
    /// why not (an older object, another value type, a refused mmap), and callers then fall back
    /// to lookups.
    pub(super) fn new(map: &MapData) -> Result<Self, String> {
        let info = map.info().map_err(|error| format!("map info: {error}"))?;
        if info.map_flags() & BPF_F_MMAPABLE == 0 {
            return Err("the map was created without BPF_F_MMAPABLE".into());
        }
        let value_size = usize::try_from(info.value_size()).unwrap_or(usize::MAX);
        if value_size != std::mem::size_of::<V>() || std::mem::align_of::<V>() > 8 {
            return Err(format!(
                "value size {value_size}, expected {}",
                std::mem::size_of::<V>()
            ));
        }
        let stride = value_size.div_ceil(8) * 8;
        let entries = info.max_entries();
        let page = crate::source::procfs::page_size_bytes()
            .and_then(|page| usize::try_from(page).ok())
            .unwrap_or(4096);
        let len_bytes = stride
            .checked_mul(usize::try_from(entries).unwrap_or(usize::MAX))
            .ok_or("map too large to map")?
            .div_ceil(page)
            * page;
        if len_bytes == 0 {
            return Err("empty map".into());
        }
        // SAFETY: a fresh read-only shared mapping of a descriptor we hold; the kernel checks
        // that the map allows it and that the length fits the map.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        Ok(Self {
            base: NonNull::new(base.cast()).ok_or("mmap returned null")?,
            len_bytes,
            stride,
            entries,
            _value: PhantomData,
        })
    }

    /// Entry `index` as the kernel has it now.
    pub(super) fn get(&self, index: u32) -> Result<V, MapError> {
        if index >= self.entries {
            return Err(MapError::OutOfBounds {
                index,
                max_entries: self.entries,
            });
        }
        // u32 fits usize on every target that runs eBPF.
        let offset = self.stride * index as usize;
        // SAFETY: `offset + size_of::<V>()` lies inside the mapping (index < entries, and the
        // mapping covers entries × stride); the kernel places each entry at a multiple of
        // 8 bytes, enough for V's alignment (checked in `new`); V is Pod, so any bytes are a
        // valid V. The programs update the counters concurrently with atomic adds of aligned
        // u64s: a volatile read sees each u64 whole, as a lookup's copy would.
        Ok(unsafe { std::ptr::read_volatile(self.base.as_ptr().add(offset).cast::<V>()) })
    }
}

impl<V> Drop for MappedArray<V> {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `new`, which nothing borrows any more.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len_bytes);
        }
    }
}
