//! `/proc/<pid>/status` (`VmHWM`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::procfs::parse_status_vm_hwm_kib;

fuzz_target!(|data: &[u8]| {
    let _ = parse_status_vm_hwm_kib(data);
});
