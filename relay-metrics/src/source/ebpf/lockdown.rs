//! Kernel lockdown: in `confidentiality` mode the kernel creates no tracefs files (it logs
//! "Tracing disabled due to lockdown"), so the classic tracepoints the programs attach to have
//! neither the `id` that attaching needs nor the `format` their field offsets come from.
//! Checked on Debian's 6.1 kernel booted with `lockdown=confidentiality` (`cargo xtask vm-test
//! --lockdown`): tracefs mounts but is empty, while `/sys/kernel/btf/vmlinux` stays readable.

use std::io;
use std::path::Path;

use super::types::EbpfUnavailable;
use crate::source::Roots;

/// True when securityfs reports the `confidentiality` lockdown mode (`none integrity
/// [confidentiality]`). False when it is unreadable: securityfs not mounted, or no lockdown LSM.
pub(super) fn is_confidentiality(roots: &Roots) -> bool {
    std::fs::read_to_string(roots.map(Path::new("/sys/kernel/security/lockdown")))
        .is_ok_and(|modes| modes.contains("[confidentiality]"))
}

/// Mounting tracefs failed with EBUSY: it is mounted already, yet has no `events` directory,
/// which is how a kernel that disabled tracing (lockdown) shows it when securityfs, which would
/// tell the lockdown mode, is not mounted.
pub(super) fn explain_busy_tracefs(error: EbpfUnavailable) -> EbpfUnavailable {
    match error {
        EbpfUnavailable::NoTracefs { path, source }
            if source.raw_os_error() == Some(libc::EBUSY) =>
        {
            EbpfUnavailable::TracingDisabled {
                why: format!(
                    "tracefs is mounted at {} but has no events; kernel lockdown \
                     'confidentiality' does this (securityfs is not mounted to tell the mode): {}",
                    path.display(),
                    io::Error::from_raw_os_error(libc::EBUSY)
                ),
            }
        }
        other => other,
    }
}
