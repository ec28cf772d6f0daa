//! `/proc/<pid>/fdinfo/<fd>` of BPF links and programs.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::ebpf::{link_program_id, program_stats};

fuzz_target!(|data: &[u8]| {
    let _ = link_program_id(data);
    let _ = program_stats(data);
});
