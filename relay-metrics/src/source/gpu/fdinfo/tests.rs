use super::*;

/// amdgpu on Linux 6.x: engine busy time in ns, memory per region in the unit the kernel picked
/// for each value (`0` has none).
const AMDGPU: &[u8] = b"pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1114\ndrm-driver:\tamdgpu\ndrm-client-id:\t11\ndrm-pdev:\t0000:03:00.0\npasid:\t32771\ndrm-total-cpu:\t0\ndrm-resident-cpu:\t0\ndrm-total-gtt:\t192 KiB\ndrm-resident-gtt:\t192 KiB\ndrm-total-vram:\t23992 KiB\ndrm-resident-vram:\t23992 KiB\ndrm-engine-gfx:\t1238484 ns\ndrm-engine-compute:\t0 ns\ndrm-engine-dma:\t42 ns\namd-memory-visible-vram:\t23992 KiB\n";

/// xe: cycle counters per engine class, and a multi-instance class.
const XE: &[u8] = b"pos:\t0\nflags:\t02080002\ndrm-driver:\txe\ndrm-client-id:\t5\ndrm-pdev:\t0000:00:02.0\ndrm-total-system:\t12 MiB\ndrm-resident-system:\t12 MiB\ndrm-resident-gtt:\t4096\ndrm-cycles-rcs:\t1000\ndrm-total-cycles-rcs:\t40000\ndrm-cycles-vcs:\t0\ndrm-total-cycles-vcs:\t40000\ndrm-engine-capacity-vcs:\t2\n";

fn engine(name: &str, busy_ns: Option<u64>, capacity: u64) -> DrmEngine {
    DrmEngine {
        name: name.to_string(),
        busy_ns,
        capacity,
        cycles: None,
        total_cycles: None,
    }
}

fn cycles(name: &str, cycles: u64, total: u64) -> DrmEngine {
    DrmEngine {
        cycles: Some(cycles),
        total_cycles: Some(total),
        ..engine(name, None, 1)
    }
}

#[test]
fn parses_amdgpu_fdinfo() {
    let info = parse_drm_fdinfo(AMDGPU).unwrap();
    assert_eq!(info.driver, "amdgpu");
    assert_eq!(info.client_id, 11);
    assert_eq!(info.pdev.as_deref(), Some("0000:03:00.0"));
    // 0 + 192 KiB + 23992 KiB: the `total`, `shared` and vendor keys are not resident memory.
    assert_eq!(info.resident_bytes, Some((23992 + 192) * 1024));
    assert_eq!(
        info.engines,
        vec![
            engine("gfx", Some(1_238_484), 1),
            engine("compute", Some(0), 1),
            engine("dma", Some(42), 1),
        ]
    );
}

#[test]
fn parses_xe_cycle_counters_and_normalises_memory_units() {
    let info = parse_drm_fdinfo(XE).unwrap();
    assert_eq!(info.driver, "xe");
    assert_eq!(info.resident_bytes, Some(12 * 1024 * 1024 + 4096));
    assert_eq!(
        info.engines,
        vec![
            cycles("rcs", 1000, 40000),
            DrmEngine {
                capacity: 2,
                ..cycles("vcs", 0, 40000)
            },
        ]
    );
}

#[test]
fn memory_units_bytes_kib_mib_and_nothing_else() {
    let resident = |text: &str| parse_drm_fdinfo(text.as_bytes()).unwrap().resident_bytes;
    let head = "drm-driver: i915\ndrm-client-id: 1\n";
    assert_eq!(
        resident(&format!("{head}drm-resident-system0: 2047\n")),
        Some(2047)
    );
    assert_eq!(
        resident(&format!("{head}drm-resident-system0: 3 KiB\n")),
        Some(3072)
    );
    assert_eq!(
        resident(&format!("{head}drm-resident-system0: 3 MiB\n")),
        Some(3 << 20)
    );
    assert_eq!(resident(head), None, "no resident key: unknown, not 0");
    assert_eq!(
        resident(&format!("{head}drm-resident-system0: 3 GiB\n")),
        None
    );
    assert_eq!(
        resident(&format!("{head}drm-resident-system0: 3 kB\n")),
        None
    );
    assert_eq!(
        resident(&format!("{head}drm-resident-system0: -3 KiB\n")),
        None
    );
    assert_eq!(
        resident(&format!(
            "{head}drm-resident-system0: 3 KiB\ndrm-resident-stolen: x\n"
        )),
        None
    );
    let huge = format!("{head}drm-resident-a: {} MiB\n", u64::MAX >> 19);
    assert_eq!(resident(&huge), None, "value overflows in bytes");
    let sum = format!("{head}drm-resident-a: {}\ndrm-resident-b: 1\n", u64::MAX);
    assert_eq!(resident(&sum), None, "sum overflows");
}

#[test]
fn files_that_are_not_drm_clients_are_refused() {
    assert_eq!(
        parse_drm_fdinfo(b"pos:\t0\nflags:\t0100002\nmnt_id:\t25\nino:\t7\n"),
        None
    );
    assert_eq!(
        parse_drm_fdinfo(b"drm-driver: amdgpu\n"),
        None,
        "no client id"
    );
    assert_eq!(parse_drm_fdinfo(b"drm-client-id: 3\n"), None, "no driver");
    assert_eq!(
        parse_drm_fdinfo(b"drm-driver: x\ndrm-client-id: -3\n"),
        None
    );
    assert_eq!(
        parse_drm_fdinfo(b"drm-driver: x\ndrm-client-id: 3\xff\n"),
        None
    );
}

#[test]
fn cycle_counter_utilisation_null_after_a_decrease_then_back() {
    let a = cycles("rcs", 1000, 10_000);
    let b = cycles("rcs", 2000, 14_000);
    assert_eq!(engine_utilization_percent(&a, &b, 1), Some(25.0));
    // The counters went backwards (a reset): no value rather than a wrong one ...
    let reset = cycles("rcs", 100, 500);
    assert_eq!(engine_utilization_percent(&b, &reset, 1), None);
    // ... and the reset reading is the next baseline.
    let c = cycles("rcs", 700, 1500);
    assert_eq!(engine_utilization_percent(&reset, &c, 1), Some(60.0));
    // No elapsed cycles: no ratio.
    assert_eq!(engine_utilization_percent(&c, &c, 1), None);
}

#[test]
fn engine_ns_utilisation_divides_by_capacity_and_clamps() {
    let before = engine("video", Some(1_000_000), 2);
    let after = engine("video", Some(2_000_000), 2);
    // 1 ms busy over 1 ms on 2 engines: 50 %.
    assert_eq!(
        engine_utilization_percent(&before, &after, 1_000_000),
        Some(50.0)
    );
    let single = |ns| engine("gfx", Some(ns), 1);
    assert_eq!(
        engine_utilization_percent(&single(0), &single(500), 1000),
        Some(50.0)
    );
    // More busy time than elapsed time (readings taken a little apart): clamped.
    assert_eq!(
        engine_utilization_percent(&single(0), &single(5000), 1000),
        Some(100.0)
    );
    assert_eq!(
        engine_utilization_percent(&single(500), &single(0), 1000),
        None
    );
    assert_eq!(engine_utilization_percent(&single(0), &single(5), 0), None);
    assert_eq!(
        engine_utilization_percent(&single(0), &engine("gfx", None, 1), 1000),
        None
    );
    // A changed capacity means the busy times are not comparable.
    assert_eq!(
        engine_utilization_percent(&engine("v", Some(0), 1), &engine("v", Some(5), 2), 10),
        None
    );
    assert_eq!(
        engine_utilization_percent(&engine("v", Some(0), 0), &engine("v", Some(5), 0), 10),
        None
    );
}

fn client(client_id: u64, engines: Vec<DrmEngine>) -> DrmFdinfo {
    DrmFdinfo {
        driver: "i915".into(),
        client_id,
        pdev: None,
        engines,
        resident_bytes: None,
    }
}

#[test]
fn utilisation_is_the_busiest_engine_and_needs_every_engine() {
    let before = client(
        1,
        vec![engine("render", Some(0), 1), engine("copy", Some(0), 1)],
    );
    let after = client(
        1,
        vec![engine("render", Some(300), 1), engine("copy", Some(700), 1)],
    );
    assert_eq!(utilization_percent([(&before, &after, 1000)]), Some(70.0));
    // An engine that appeared since the baseline has no pair: unknown, not the other's value.
    let more = client(
        1,
        vec![
            engine("render", Some(300), 1),
            engine("copy", Some(700), 1),
            engine("video", Some(1), 1),
        ],
    );
    assert_eq!(utilization_percent([(&before, &more, 1000)]), None);
    assert_eq!(
        utilization_percent([(&client(1, vec![]), &client(1, vec![]), 1000)]),
        None
    );
    assert_eq!(utilization_percent([]), None);
}

#[test]
fn clients_of_one_process_add_up_per_engine() {
    let idle = client(
        1,
        vec![engine("render", Some(0), 1), engine("copy", Some(0), 1)],
    );
    let a = client(
        1,
        vec![engine("render", Some(300), 1), engine("copy", Some(100), 1)],
    );
    let b = client(
        2,
        vec![engine("render", Some(200), 1), engine("copy", Some(500), 1)],
    );
    // render 30 % + 20 % = 50 %, copy 10 % + 50 % = 60 %: the busiest engine is copy.
    let both = utilization_percent([(&idle, &a, 1000), (&idle, &b, 1000)]).unwrap();
    assert!((both - 60.0).abs() < 1e-9, "{both}");
    let full = client(
        3,
        vec![engine("render", Some(900), 1), engine("copy", Some(0), 1)],
    );
    assert_eq!(
        utilization_percent([(&idle, &a, 1000), (&idle, &full, 1000)]),
        Some(100.0)
    );
    // One client without a baseline makes the whole process unknown.
    assert_eq!(
        utilization_percent([(&idle, &a, 1000), (&idle, &b, 0)]),
        None
    );
}

#[test]
fn a_capacity_line_with_garbage_disables_that_engine() {
    let info = parse_drm_fdinfo(b"drm-driver: i915\ndrm-client-id: 1\ndrm-engine-video: 10 ns\ndrm-engine-capacity-video: zero\n").unwrap();
    assert_eq!(info.engines, vec![engine("video", Some(10), 0)]);
    assert_eq!(
        engine_utilization_percent(&info.engines[0], &info.engines[0], 10),
        None
    );
}
