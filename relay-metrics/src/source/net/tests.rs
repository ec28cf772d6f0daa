//! Parser tests on captured bytes, and live tests against this machine's counters.

use super::*;
use std::net::UdpSocket;
use std::time::Duration;

const CAPTURED: &[u8] = include_bytes!("testdata/net_dev");
const HEADER_LINES: &str = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n";

fn parse(content: &[u8]) -> Vec<InterfaceCounters> {
    let mut out = Vec::new();
    parse_net_dev(content, &mut out).unwrap();
    out
}

fn with_header(body: &str) -> Vec<u8> {
    format!("{HEADER_LINES}{body}").into_bytes()
}

#[test]
fn parses_captured_net_dev_sorted_by_name() {
    let out = parse(CAPTURED);
    let names: Vec<&str> = out.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["eth0", "ifb0", "ifb1", "lo"]);
    assert_eq!(
        out[0],
        InterfaceCounters {
            name: "eth0".into(),
            counts: InterfaceCounts {
                rx_bytes: Some(308_299_993),
                tx_bytes: Some(428_479),
                rx_packets: Some(7368),
                tx_packets: Some(4618),
                rx_errors: Some(0),
                tx_errors: Some(0),
                rx_dropped: Some(0),
                tx_dropped: Some(0),
            },
        }
    );
    assert_eq!(out[3].counts.rx_bytes, Some(3193));
    assert_eq!(out[3].counts.tx_packets, Some(29));
}

#[test]
fn reads_the_error_columns_not_the_drop_columns() {
    let out = parse(&with_header(
        "  eth9: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n",
    ));
    let eth9 = &out[0];
    assert_eq!(
        (
            eth9.counts.rx_bytes,
            eth9.counts.rx_packets,
            eth9.counts.rx_errors
        ),
        (Some(1), Some(2), Some(3))
    );
    assert_eq!(
        (
            eth9.counts.tx_bytes,
            eth9.counts.tx_packets,
            eth9.counts.tx_errors
        ),
        (Some(9), Some(10), Some(11))
    );
}

#[test]
fn long_names_and_counters_glued_to_the_colon() {
    let out = parse(&with_header(
        "enp0s31f6long:123456789012 5 0 0 0 0 0 0 99 6 0 0 0 0 0 0\n",
    ));
    assert_eq!(out[0].name, "enp0s31f6long");
    assert_eq!(out[0].counts.rx_bytes, Some(123_456_789_012));
    assert_eq!(out[0].counts.tx_bytes, Some(99));
}

#[test]
fn malformed_lines_give_none_not_wrong_numbers() {
    let out = parse(&with_header(
        "  bad0: 1 x 3 4 5 6 7 8 9 10 -1 12 13 14 15 16\n  cut0: 1 2 3\nno colon here\n   : 1 2 3\n",
    ));
    let names: Vec<&str> = out.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["bad0", "cut0"]);
    assert_eq!(out[0].counts.rx_bytes, Some(1));
    assert_eq!(out[0].counts.rx_packets, None);
    assert_eq!(out[0].counts.tx_errors, None);
    assert_eq!(out[1].counts.rx_errors, Some(3));
    assert_eq!(out[1].counts.tx_bytes, None);
    assert_eq!(out[1].counts.tx_packets, None);
}

#[test]
fn content_without_the_header_is_rejected_and_clears_the_output() {
    let mut out = parse(CAPTURED);
    assert_eq!(parse_net_dev(b"lo: 1 2 3\n", &mut out), None);
    assert!(out.is_empty());
    assert_eq!(parse_net_dev(b"", &mut out), None);
}

#[test]
fn truncation_never_panics() {
    let mut out = Vec::new();
    for end in 0..CAPTURED.len() {
        let _ = parse_net_dev(&CAPTURED[..end], &mut out);
        assert!(out.len() <= 4);
    }
}

#[test]
fn a_stable_interface_set_reuses_every_name() {
    let mut out = parse(CAPTURED);
    let before: Vec<(*const u8, usize)> = out
        .iter()
        .map(|c| (c.name.as_ptr(), c.name.capacity()))
        .collect();
    for _ in 0..3 {
        parse_net_dev(CAPTURED, &mut out).unwrap();
    }
    let mut after: Vec<(*const u8, usize)> = out
        .iter()
        .map(|c| (c.name.as_ptr(), c.name.capacity()))
        .collect();
    let mut before_sorted = before.clone();
    before_sorted.sort_unstable();
    after.sort_unstable();
    assert_eq!(
        before_sorted, after,
        "the same name buffers, possibly reordered"
    );
    assert_eq!(out[0].name, "eth0");
}

#[test]
fn interfaces_coming_and_going_are_reflected() {
    let mut out = parse(CAPTURED);
    parse_net_dev(
        &with_header(
            "  zz9: 1 1 0 0 0 0 0 0 1 1 0 0 0 0 0 0\n    lo: 5 5 0 0 0 0 0 0 5 5 0 0 0 0 0 0\n",
        ),
        &mut out,
    )
    .unwrap();
    let names: Vec<&str> = out.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["lo", "zz9"]);
    assert_eq!(out[0].counts.rx_bytes, Some(5));
}

#[test]
fn selects_all_or_exact_names() {
    assert!(select(&[], "eth0"));
    let wanted = vec!["eth0".to_string()];
    assert!(select(&wanted, "eth0"));
    assert!(!select(&wanted, "eth"));
    assert!(!select(&wanted, "eth01"));
}

#[test]
fn reads_a_fixture_tree_and_reports_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut out = Vec::new();
    let mut missing = NetReader::new(&Roots::fixture(dir.path()));
    let error = missing.read(&mut out).unwrap_err();
    assert!(error.to_string().contains("proc/net/dev"), "{error}");

    std::fs::create_dir_all(dir.path().join("proc/net")).unwrap();
    std::fs::write(dir.path().join("proc/net/dev"), CAPTURED).unwrap();
    let mut reader = NetReader::new(&Roots::fixture(dir.path()));
    reader.read(&mut out).unwrap();
    assert_eq!(out.len(), 4);

    std::fs::write(dir.path().join("proc/net/dev"), b"garbage\n").unwrap();
    let error = reader.read(&mut out).unwrap_err();
    assert!(error.to_string().contains("malformed"), "{error}");
    assert!(out.is_empty());
}

fn lo(out: &[InterfaceCounters]) -> &InterfaceCounters {
    out.iter().find(|c| c.name == "lo").expect("lo exists")
}

/// Sends `count` UDP datagrams of `payload` bytes to a socket on 127.0.0.1 and receives them.
fn loopback_traffic(count: usize, payload: usize) {
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    let data = vec![0xa5u8; payload];
    let mut buf = vec![0u8; payload + 1];
    for _ in 0..count {
        sender
            .send_to(&data, receiver.local_addr().unwrap())
            .unwrap();
        assert_eq!(receiver.recv(&mut buf).unwrap(), payload);
    }
}

#[test]
fn live_loopback_counters_grow_by_at_least_the_sent_traffic() {
    let mut reader = NetReader::new(&Roots::host());
    let mut before = Vec::new();
    let mut after = Vec::new();
    reader.read(&mut before).unwrap();
    let (count, payload) = (50u64, 1000u64);
    loopback_traffic(count as usize, payload as usize);
    reader.read(&mut after).unwrap();
    let (before, after) = (lo(&before), lo(&after));
    // Each datagram crosses lo once: counted as sent and as received, with at least 28 bytes of
    // IP+UDP header on top of the payload (lo also counts a 14-byte Ethernet header).
    let grew = |b: Option<u64>, a: Option<u64>| a.unwrap() - b.unwrap();
    assert!(grew(before.counts.rx_packets, after.counts.rx_packets) >= count);
    assert!(grew(before.counts.tx_packets, after.counts.tx_packets) >= count);
    assert!(grew(before.counts.rx_bytes, after.counts.rx_bytes) >= count * (payload + 28));
    assert!(grew(before.counts.tx_bytes, after.counts.tx_bytes) >= count * (payload + 28));
    assert_eq!(after.counts.rx_errors, Some(0));
}

fn sysfs_counter(interface: &str, counter: &str) -> u64 {
    let path = Roots::host()
        .sys
        .join("class/net")
        .join(interface)
        .join("statistics")
        .join(counter);
    std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `/proc/net/dev` and sysfs expose the same kernel counters: a sysfs read taken between two
/// `/proc/net/dev` reads lies between them, for every interface and all six counters, while
/// loopback traffic flows in between.
#[test]
fn live_proc_net_dev_agrees_with_sysfs_statistics() {
    let mut reader = NetReader::new(&Roots::host());
    let (mut first, mut second) = (Vec::new(), Vec::new());
    reader.read(&mut first).unwrap();
    loopback_traffic(20, 200);
    let sysfs: Vec<[u64; 6]> = first
        .iter()
        .map(|c| SYSFS_COUNTERS.map(|counter| sysfs_counter(&c.name, counter)))
        .collect();
    loopback_traffic(20, 200);
    reader.read(&mut second).unwrap();

    let mut listed: Vec<String> = std::fs::read_dir("/sys/class/net")
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    listed.sort();
    let names: Vec<&str> = second.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, listed, "the same interfaces in both sources");

    for ((a, b), s) in first.iter().zip(&second).zip(&sysfs) {
        assert_eq!(a.name, b.name);
        let (a_values, b_values) = (a.counts.to_array(), b.counts.to_array());
        for i in 0..6 {
            let (low, high) = (a_values[i].unwrap(), b_values[i].unwrap());
            assert!(
                low <= s[i] && s[i] <= high,
                "{} counter {i}: proc {low}..{high}, sysfs {}",
                a.name,
                s[i]
            );
        }
    }
    let lo_rx = sysfs
        .get(names.iter().position(|n| *n == "lo").unwrap())
        .unwrap()[0];
    let (low, high) = (
        lo(&first).counts.rx_bytes.unwrap(),
        lo(&second).counts.rx_bytes.unwrap(),
    );
    assert!(
        low < lo_rx && lo_rx < high,
        "traffic flowed on both sides of the sysfs read"
    );
}

/// `/proc/net/dev` is a record-by-record seq_file: with 300 interfaces it is ~40 KiB, handed
/// out a page per read, and the reader lists every interface.
#[test]
#[ignore = "root: makes a network namespace with 300 interfaces"]
fn three_hundred_interfaces_are_all_read() {
    let interfaces = crate::long_files::Interfaces::new(300);
    let roots = Roots {
        proc: interfaces.proc_dir(),
        sys: std::path::PathBuf::from("/sys"),
    };
    let oracle = std::fs::read(roots.proc.join("net/dev")).unwrap();
    assert!(
        oracle.len() > 8 * crate::long_files::PAGE,
        "{}",
        oracle.len()
    );
    let mut expected: Vec<String> = String::from_utf8(oracle)
        .unwrap()
        .lines()
        .skip(2)
        .map(|line| line.split(':').next().unwrap().trim().to_string())
        .collect();
    expected.sort();
    assert_eq!(expected.len(), 301);
    let mut reader = NetReader::new(&roots);
    let mut out = Vec::new();
    reader.read(&mut out).unwrap();
    let names: Vec<String> = out.iter().map(|c| c.name.clone()).collect();
    assert_eq!(names, expected);
}

/// `/proc/net/dev` captured on this machine from a network namespace with 150 veth pairs
/// (three of them up, with link-local traffic): 303 lines, 37 KB. Every interface is parsed,
/// with the values a plain whitespace split of the same line gives.
#[test]
fn a_captured_300_interface_net_dev_parses_whole() {
    let captured: &[u8] = include_bytes!("testdata/net_dev_300");
    let out = parse(captured);
    let text = std::str::from_utf8(captured).unwrap();
    let mut expected: Vec<(String, [Option<u64>; 6])> = text
        .lines()
        .skip(2)
        .map(|line| {
            let (name, data) = line.split_once(':').unwrap();
            let v: Vec<u64> = data
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            let values = [v[0], v[1], v[2], v[8], v[9], v[10]].map(Some);
            (name.trim().to_string(), values)
        })
        .collect();
    expected.sort();
    assert_eq!(expected.len(), 301);
    let parsed: Vec<(String, [Option<u64>; 6])> = out
        .iter()
        .map(|c| {
            let n = &c.counts;
            (
                c.name.clone(),
                [
                    n.rx_bytes,
                    n.rx_packets,
                    n.rx_errors,
                    n.tx_bytes,
                    n.tx_packets,
                    n.tx_errors,
                ],
            )
        })
        .collect();
    assert_eq!(parsed, expected);
    assert!(
        expected.iter().any(|(_, v)| v[0] > Some(0)),
        "traffic on some"
    );
}

/// A container's namespace as its `/proc/<pid>/net/dev` gives it: every column Relay's six and
/// cAdvisor's drops come from, each a different number.
#[test]
fn parses_a_containers_net_dev_with_drops() {
    let out = parse(include_bytes!("testdata/net_dev_container"));
    let eth0 = out.iter().find(|c| c.name == "eth0").unwrap();
    assert_eq!(
        eth0.counts,
        InterfaceCounts {
            rx_bytes: Some(1_342_201),
            rx_packets: Some(2011),
            rx_errors: Some(3),
            rx_dropped: Some(4),
            tx_bytes: Some(98_765),
            tx_packets: Some(997),
            tx_errors: Some(5),
            tx_dropped: Some(6),
        }
    );
    assert_eq!(out.len(), 2);
}
