//! A boot of its own (`cargo xtask vm-test --many-cpus`): 2 online of 64 possible CPUs, as a
//! big host's kernel sizes per-CPU data (per-CPU eBPF map slots, per-CPU counters) for every
//! possible CPU.

use std::process::Command;
use std::time::Duration;

use super::live_v2::collector;

/// The per-CPU eBPF maps and the kernel's per-CPU data have 64 slots for 2 CPUs: the
/// machine's CPU time and rates are those of the 2 online CPUs, and the kernel events (summed
/// over the per-CPU slots) count.
#[test]
#[ignore = "vm: needs 64 possible CPUs: cargo xtask vm-test --many-cpus runs it"]
fn two_online_of_sixty_four_possible_cpus_are_read_right_in_vm() {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .expect(path)
            .trim()
            .to_string()
    };
    assert_eq!(read("/sys/devices/system/cpu/possible"), "0-63");
    assert_eq!(read("/sys/devices/system/cpu/online"), "0-1");
    let mut spin = Command::new(std::env::current_exe().expect("test binary path"))
        .env(super::CHILD_MODE, "spin")
        .spawn()
        .expect("spinning child");
    let mut collector = collector();
    drop(collector.collect());
    std::thread::sleep(Duration::from_millis(1500));
    let snapshot = collector.collect();
    let _ = spin.kill();
    let _ = spin.wait();
    let cpu = snapshot.cpu.as_ref().expect("cpu category");
    let rate = cpu
        .consumption_rate
        .as_ref()
        .map(|m| m.value.as_f64())
        .expect("consumption_rate");
    // One child spins: about one CPU's worth, never more than the two online.
    assert!(
        (0.5..=2.0).contains(&rate),
        "consumption_rate {rate} logical processors"
    );
    let events = &snapshot.extensions.kernel_events;
    assert!(events.active, "{:?}", events.reason);
    let stat = std::fs::read("/proc/stat").expect("/proc/stat");
    let mut per_cpu = Vec::new();
    crate::source::system::parse_stat(&stat, &mut per_cpu).expect("/proc/stat parses");
    assert_eq!(per_cpu.len(), 2);
}
