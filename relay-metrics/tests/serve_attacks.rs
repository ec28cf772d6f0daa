//! Attacks on the agent's HTTP endpoint, on 127.0.0.1 only and bounded in count and time:
//! slowloris connections (a byte a second, never finishing their head), a flood of idle
//! connections, and clients that request a large body and never read it. While each attack is
//! held, a well-behaved client asks for `/metrics` on fresh connections for longer than any
//! head deadline; every one of its requests must be answered 200 within 2 s. That is all these
//! tests assert, because it cannot flake on a loaded machine (latency figures come from the
//! load script, `tools/load/`, in docs/PERFORMANCE.md).

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{exchange, raise_fd_limit, start_agent, start_command, wait_ready};

/// How an attacking connection behaves.
#[derive(Clone, Copy)]
enum Kind {
    /// Connects and sends nothing.
    Idle,
    /// Sends the start of a request head, then one byte a second, never ending it.
    Slowloris,
    /// Sends complete requests for `/metrics` and never reads a byte (tiny receive buffer).
    NonReading,
}

/// Holds `count` connections of one kind open on a thread until dropped, re-opening any the
/// server closed (an attack that is held, not one that gives up).
struct Attack {
    stop: Arc<AtomicBool>,
    reopened: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Attack {
    fn start(address: &str, kind: Kind, count: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let reopened = Arc::new(AtomicU64::new(0));
        let (address, thread_stop, thread_reopened) = (
            address.to_string(),
            Arc::clone(&stop),
            Arc::clone(&reopened),
        );
        let (ready, opened) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let mut streams: Vec<Option<TcpStream>> =
                (0..count).map(|_| open(&address, kind)).collect();
            let _ = ready.send(());
            let mut tick = 0u64;
            while !thread_stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(250));
                tick += 1;
                for slot in &mut streams {
                    let alive = match slot {
                        Some(stream) => poke(stream, kind, tick.is_multiple_of(4)),
                        None => false,
                    };
                    if !alive {
                        *slot = open(&address, kind);
                        thread_reopened.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        // A server that does not accept leaves connects hanging: go on after a while anyway,
        // the attack keeps re-trying those in its loop.
        let _ = opened.recv_timeout(Duration::from_secs(20));
        Self {
            stop,
            reopened,
            thread: Some(thread),
        }
    }
}

impl Drop for Attack {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        eprintln!(
            "attack: {} connections re-opened after the server closed them",
            self.reopened.load(Ordering::Relaxed)
        );
    }
}

fn open(address: &str, kind: Kind) -> Option<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
    if let Kind::NonReading = kind {
        // A small window: the server's writes block after a few kilobytes.
        socket.set_recv_buffer_size(4096).ok()?;
    }
    let target: std::net::SocketAddr = address.parse().ok()?;
    socket
        .connect_timeout(&target.into(), Duration::from_millis(500))
        .ok()?;
    let mut stream: TcpStream = socket.into();
    match kind {
        Kind::Idle => {}
        Kind::Slowloris => stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: attacker\r\nX-Slow: ")
            .ok()?,
        Kind::NonReading => {
            let request = b"GET /metrics HTTP/1.1\r\nHost: attacker\r\n\r\n";
            stream.write_all(&request.repeat(4)).ok()?;
        }
    }
    stream.set_nonblocking(true).ok()?;
    Some(stream)
}

/// Keeps one connection going (a byte for slowloris, every second); false once the server
/// closed it.
fn poke(stream: &mut TcpStream, kind: Kind, second: bool) -> bool {
    match kind {
        // Never read: a closed connection shows as a failed write, soon enough.
        Kind::NonReading => true,
        Kind::Slowloris if second => match stream.write(b"a") {
            Ok(_) => true,
            Err(error) => error.kind() == ErrorKind::WouldBlock,
        },
        Kind::Idle | Kind::Slowloris => {
            let mut byte = [0u8; 1];
            match stream.read(&mut byte) {
                Ok(0) => false,
                Ok(_) => true,
                Err(error) => error.kind() == ErrorKind::WouldBlock,
            }
        }
    }
}

/// A well-behaved client: `GET /metrics` on a fresh connection every 200 ms for `duration`;
/// each must be answered 200 within 2 s. Returns the slowest answer.
fn good_client_is_served(address: &str, duration: Duration) -> Duration {
    let end = Instant::now() + duration;
    let mut slowest = Duration::ZERO;
    let mut answered = 0;
    while Instant::now() < end {
        let started = Instant::now();
        let response = exchange(
            address,
            &format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
            Duration::from_secs(2),
        )
        .unwrap_or_else(|error| panic!("request {answered} was not answered within 2 s: {error}"));
        assert_eq!(response.status, 200, "{}", response.text());
        assert!(response.text().contains("relay_metrics_snapshots_total"));
        slowest = slowest.max(started.elapsed());
        answered += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("good client: {answered} requests, slowest {slowest:?}");
    slowest
}

/// Longer than any head deadline the server might use to get rid of attackers one by one.
const GOOD_CLIENT_FOR: Duration = Duration::from_secs(7);

#[test]
fn slowloris_connections_do_not_starve_a_good_client() {
    raise_fd_limit();
    let agent = start_agent(&["--scope", "global"]);
    wait_ready(&agent.address);
    let _attack = Attack::start(&agent.address, Kind::Slowloris, 200);
    good_client_is_served(&agent.address, GOOD_CLIENT_FOR);
}

#[test]
fn a_flood_of_idle_connections_does_not_starve_a_good_client() {
    raise_fd_limit();
    let agent = start_agent(&["--scope", "global"]);
    wait_ready(&agent.address);
    let _attack = Attack::start(&agent.address, Kind::Idle, 1000);
    good_client_is_served(&agent.address, GOOD_CLIENT_FOR);
}

#[test]
fn clients_that_never_read_a_large_body_do_not_starve_a_good_client() {
    raise_fd_limit();
    // 20,000 filesystem paths make `/metrics` ~5 MB: more than the socket buffers between the
    // server and a client that never reads can take (the server's send buffer grows to a few
    // MB on loopback).
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<String> = (0..20_000)
        .map(|i| {
            let path = dir.path().join(format!("p{i}"));
            std::fs::create_dir(&path).unwrap();
            path.display().to_string()
        })
        .collect();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        serde_json::json!({
            "disk": {"filesystem_paths": paths},
            "extensions": {"kernel_events": false}
        })
        .to_string(),
    )
    .unwrap();
    let config = config.display().to_string();
    let agent = start_command({
        let mut command = std::process::Command::new(common::binary());
        command.args(["serve", "--listen", "127.0.0.1:0", "--interval-ms", "1000"]);
        command.args(["--scope", "global", "--config", &config]);
        command
    });
    wait_ready(&agent.address);
    // Filesystem capacities come from helper processes off the sampling path: the series fill
    // once the first round over the 20,000 paths is done (~10 s here, longer under load).
    let deadline = Instant::now() + Duration::from_secs(120);
    let size = loop {
        let size = common::get(&agent.address, "/metrics").body.len();
        if size > 5_000_000 || Instant::now() > deadline {
            break size;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        size > 5_000_000,
        "/metrics is only {size} bytes after 120 s"
    );
    let _attack = Attack::start(&agent.address, Kind::NonReading, 100);
    good_client_is_served(&agent.address, GOOD_CLIENT_FOR);
}

/// The agent's resident memory, KiB.
fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// One flood as the reliability probe made it: 2,000 idle connections and 200 slowloris held
/// while 1,000 scrapes are answered, then all closed.
fn flood(address: &str) {
    let target: std::net::SocketAddr = address
        .parse()
        .unwrap_or_else(|error| panic!("{address}: {error}"));
    let idle: Vec<TcpStream> = (0..2000)
        .filter_map(|_| TcpStream::connect_timeout(&target, Duration::from_secs(2)).ok())
        .collect();
    let slow: Vec<TcpStream> = (0..200)
        .filter_map(|_| open(address, Kind::Slowloris))
        .collect();
    let scrapers: Vec<_> = (0..4)
        .map(|_| {
            let address = address.to_string();
            std::thread::spawn(move || {
                for _ in 0..250 {
                    let _ = exchange(
                        &address,
                        &format!(
                            "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
                        ),
                        Duration::from_secs(10),
                    );
                }
            })
        })
        .collect();
    for scraper in scrapers {
        assert!(scraper.join().is_ok(), "a scraper panicked");
    }
    eprintln!("flood: {} idle, {} slowloris held", idle.len(), slow.len());
    drop(idle);
    drop(slow);
}

/// Memory taken during floods is given back: the allocator kept the freed chunks resident
/// (28 → 76 MB over four floods, for good), now its free pages go back to the kernel after a
/// flood, and resident memory comes back within 10 MB of where it was.
#[test]
fn memory_is_given_back_after_floods_of_connections_and_scrapes() {
    raise_fd_limit();
    let agent = start_agent(&["--scope", "global", "--interval-ms", "1000"]);
    wait_ready(&agent.address);
    let pid = agent.child.0.id();
    // Settled: a few scrapes and samples made, what the agent keeps is allocated.
    for _ in 0..20 {
        let _ = common::get(&agent.address, "/metrics");
    }
    std::thread::sleep(Duration::from_secs(3));
    let resident = || resident_kib(pid).unwrap();
    let before = resident();
    let mut peak = before;
    for _ in 0..2 {
        flood(&agent.address);
        peak = peak.max(resident());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = resident();
    while after > before + 10 * 1024 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        after = resident();
    }
    eprintln!("resident: {before} KiB before, {peak} KiB at a flood's end, {after} KiB after");
    assert!(
        after <= before + 10 * 1024,
        "resident {after} KiB 10 s after the floods, {before} KiB before (peak {peak} KiB)"
    );
}
