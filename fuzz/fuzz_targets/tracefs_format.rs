//! tracefs `events/<category>/<name>/format` files into the eBPF programs' field offsets. The
//! input holds the seven format files the programs read, separated by NUL bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::ebpf::{sleep_state_mask, tracepoint_config, Formats};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|&b| b == 0).map(<[u8]>::to_vec);
    let mut next = || parts.next().unwrap_or_default();
    let formats = Formats {
        newtask: next(),
        exit: next(),
        switch: next(),
        wakeup: next(),
        wakeup_new: next(),
        mark_victim: next(),
        throttled: next(),
    };
    let _ = sleep_state_mask(&formats.switch);
    let _ = tracepoint_config(&formats);
});
