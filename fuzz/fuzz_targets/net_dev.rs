//! `/proc/net/dev`; its slots are reused across reads, so a reused buffer must parse the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::system::parse_net_dev;

const CAPTURED: &[u8] = b"Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo: 100 2 0 0 0 0 0 0 100 2 0 0 0 0 0 0\n  eth0: 5000 50 1 0 0 0 0 0 7000 70 2 0 0 0 0 0\n  wlan0: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n";

fuzz_target!(|data: &[u8]| {
    let mut fresh = Vec::new();
    let result = parse_net_dev(data, &mut fresh);
    let mut reused = Vec::new();
    let _ = parse_net_dev(CAPTURED, &mut reused);
    assert_eq!(parse_net_dev(data, &mut reused), result);
    assert_eq!(reused, fresh);
    // Sorted by name, as documented.
    assert!(fresh.windows(2).all(|pair| pair[0].name <= pair[1].name));
});
