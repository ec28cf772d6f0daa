//! Extended attributes of a file (systemd marks a delegated unit's cgroup with one).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

/// The longest attribute value read; systemd's markers are one byte.
const MAX_VALUE: usize = 256;

/// The value of attribute `name` on `path`, or `None` when it is absent or cannot be read.
pub(crate) fn get(path: &Path, name: &str) -> Option<Vec<u8>> {
    let path = CString::new(path.as_os_str().as_bytes()).ok()?;
    let name = CString::new(name).ok()?;
    let mut value = vec![0u8; MAX_VALUE];
    // SAFETY: both strings are NUL-terminated and outlive the call; the kernel writes at most
    // `value.len()` bytes into `value`, which is that long.
    let len = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    let len = usize::try_from(len).ok()?;
    value.truncate(len);
    Some(value)
}

/// Sets attribute `name` on `path` (tests make delegated-looking cgroups with it).
#[cfg(test)]
pub(crate) fn set(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let path = CString::new(path.as_os_str().as_bytes())?;
    let name = CString::new(name)?;
    // SAFETY: both strings are NUL-terminated and outlive the call; `value` is read for its
    // length only.
    let rc = unsafe {
        libc::setxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
