//! Basic auth under a flood (`--web-config-file` with `basic_auth_users`, plain HTTP on
//! loopback): one address sending many wrong passwords does not delay another address's first
//! login beyond one verification; a repeated wrong password is answered without bcrypt; an
//! unknown user costs as much as a known one; connections waiting for their check do not fill
//! the connection cap against another address; clients that hang up do not start more bcrypt
//! runs than the pool's; `/healthz` needs no credentials. The other source addresses are
//! 127.0.0.2 and 127.0.0.3 (all of 127/8 is loopback on Linux), bound before connecting.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use base64::Engine as _;

/// A bcrypt hash of `password` at the lowest cost (from 4 up) whose verification takes at
/// least 100 ms in this build (the agent is built the same way), and that verification's time.
fn calibrated_hash(password: &str) -> (String, Duration) {
    for cost in 4..=12 {
        let hash = bcrypt::hash(password, cost).unwrap();
        let started = Instant::now();
        assert!(bcrypt::verify(password, &hash).unwrap());
        let took = started.elapsed();
        if took >= Duration::from_millis(100) || cost == 12 {
            eprintln!("bcrypt cost {cost}: one verification takes {took:?} here");
            return (hash, took);
        }
    }
    unreachable!()
}

/// A connection from `source` (an IPv4 loopback address) to the agent.
fn connect_from(source: [u8; 4], agent: &str) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::from((source, 0)).into())
        .unwrap_or_else(|error| panic!("bind {source:?}: {error}"));
    let agent: SocketAddr = agent.parse().unwrap();
    socket.connect(&agent.into()).unwrap();
    socket.into()
}

/// Sends `GET /metrics` with `user:password` (`Connection: close`).
fn send(stream: &mut TcpStream, user: &str, password: &str) {
    try_send(stream, user, password).unwrap();
}

/// [`send`], failing where the agent closed the connection.
fn try_send(stream: &mut TcpStream, user: &str, password: &str) -> std::io::Result<()> {
    let credentials =
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {credentials}\r\n\
         Connection: close\r\n\r\n"
    )
}

/// Reads the response's status (the connection closes after it), within `timeout`.
fn status(stream: &mut TcpStream, timeout: Duration) -> u16 {
    stream.set_read_timeout(Some(timeout)).unwrap();
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|error| panic!("no answer within {timeout:?}: {error}"));
    common::parse_response(&raw).unwrap().status
}

/// One request from `source`: its status and how long the answer took.
fn timed(source: [u8; 4], agent: &str, user: &str, password: &str) -> (u16, Duration) {
    let mut stream = connect_from(source, agent);
    let started = Instant::now();
    send(&mut stream, user, password);
    let status = status(&mut stream, Duration::from_secs(60));
    (status, started.elapsed())
}

fn start(hash: &str) -> (common::Agent, tempfile::TempDir) {
    start_with_open_files(hash, None)
}

/// [`start`], with the agent's open-file limit (soft and hard) set to `limit`: 120 gives the
/// lowest connection cap, 32.
fn start_with_open_files(hash: &str, limit: Option<u64>) -> (common::Agent, tempfile::TempDir) {
    use std::os::unix::process::CommandExt as _;
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let mut command = common::agent_command(&[
        "--scope",
        "global",
        "--web-config-file",
        web.to_str().unwrap(),
    ]);
    if let Some(limit) = limit {
        // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
        unsafe {
            command.pre_exec(move || {
                nix::sys::resource::setrlimit(
                    nix::sys::resource::Resource::RLIMIT_NOFILE,
                    limit,
                    limit,
                )
                .map_err(std::io::Error::from)
            });
        }
    }
    (common::start_command(command), dir)
}

/// The agent's thread count (`/proc/<pid>/status`).
fn threads(agent: &common::Agent) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", agent.child.0.id())).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_flood_of_wrong_passwords_from_one_address_does_not_delay_another_addresss_first_login() {
    let (hash, verification) = calibrated_hash("s3cret");
    let (agent, _dir) = start(&hash);
    // The first snapshot (the login's answer must be 200, not "no snapshot yet").
    std::thread::sleep(Duration::from_millis(1500));
    const FLOOD: usize = 150;
    let mut flood: Vec<TcpStream> = (0..FLOOD)
        .map(|i| {
            let mut stream = connect_from([127, 0, 0, 2], &agent.address);
            send(&mut stream, "prometheus", &format!("wrong-{i}"));
            stream
        })
        .collect();
    // The flood is being verified.
    std::thread::sleep(verification * 2);
    let (login, took) = timed([127, 0, 0, 1], &agent.address, "prometheus", "s3cret");
    eprintln!(
        "first correct login from 127.0.0.1 behind {FLOOD} wrong passwords from 127.0.0.2: \
         {login} in {took:?} (one verification: {verification:?})"
    );
    assert_eq!(login, 200);
    assert!(
        took <= Duration::from_secs(1),
        "the first login took {took:?} behind the flood"
    );
    // The flood was still queued: its last request is not answered yet (150 verifications on
    // one slot take 150 × {verification:?}).
    let last = flood.last_mut().unwrap();
    last.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    assert!(
        matches!(last.read(&mut byte), Err(error) if error.kind() == std::io::ErrorKind::WouldBlock),
        "the whole flood was answered already: it was no flood"
    );
    // Its first request was answered, with 401.
    assert_eq!(status(&mut flood[0], Duration::from_secs(30)), 401);
    // The login is now remembered: answered without bcrypt, whatever the flood does.
    let (again, took) = timed([127, 0, 0, 1], &agent.address, "prometheus", "s3cret");
    assert_eq!(again, 200);
    assert!(took < verification, "a verified login took {took:?}");
}

#[test]
fn a_repeated_wrong_password_skips_bcrypt_and_an_unknown_user_costs_a_verification() {
    let (hash, verification) = calibrated_hash("s3cret");
    let (agent, _dir) = start(&hash);
    let source = [127, 0, 0, 3];
    let (first, first_took) = timed(source, &agent.address, "prometheus", "wrong");
    assert_eq!(first, 401);
    let (second, second_took) = timed(source, &agent.address, "prometheus", "wrong");
    assert_eq!(second, 401);
    // Unknown users are compared with a dummy hash of the same cost: as slow as a known one.
    let (unknown, unknown_took) = timed(source, &agent.address, "nobody", "s3cret");
    assert_eq!(unknown, 401);
    eprintln!(
        "wrong password: {first_took:?}, the same again: {second_took:?}, unknown user: \
         {unknown_took:?} (one verification: {verification:?})"
    );
    assert!(
        second_took * 4 < first_took,
        "the repeated wrong password took {second_took:?} after {first_took:?}"
    );
    assert!(
        unknown_took * 3 > first_took,
        "an unknown user took {unknown_took:?}, a known user's wrong password {first_took:?}"
    );
}

/// 80 connections from 127.0.0.2 (the cap is 32), each with three wrong passwords pipelined,
/// are all waiting for checks that take over 24 s one after the other; a correct login from
/// 127.0.0.3 is still answered within a few verifications, because a connection waiting for
/// its check may be closed to make room (it was counted busy, and every new connection was
/// closed at once).
#[test]
fn connections_waiting_for_their_check_do_not_lock_another_address_out() {
    let (hash, verification) = calibrated_hash("s3cret");
    let (agent, _dir) = start_with_open_files(&hash, Some(120));
    std::thread::sleep(Duration::from_millis(1500));
    let flood: Vec<TcpStream> = (0..80)
        .filter_map(|i| {
            let mut stream = connect_from([127, 0, 0, 2], &agent.address);
            let credentials = |n: usize| {
                base64::engine::general_purpose::STANDARD.encode(format!("prometheus:wrong-{n}"))
            };
            let requests: String = (0..3)
                .map(|n| {
                    format!(
                        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {}\r\n\r\n",
                        credentials(i * 3 + n)
                    )
                })
                .collect();
            // A connection the agent closed at once (at the cap) fails here: counted below.
            stream.write_all(requests.as_bytes()).ok().map(|()| stream)
        })
        .collect();
    std::thread::sleep(verification * 2);
    let started = Instant::now();
    let mut answers = Vec::new();
    let login = loop {
        let mut stream = connect_from([127, 0, 0, 3], &agent.address);
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut raw = Vec::new();
        let answer = try_send(&mut stream, "prometheus", "s3cret")
            .and_then(|()| stream.read_to_end(&mut raw))
            .map(|_| raw);
        match answer
            .ok()
            .and_then(|raw| common::parse_response(&raw).ok())
        {
            Some(response) => break Some(response.status),
            None => answers.push(started.elapsed()),
        }
        if started.elapsed() > Duration::from_secs(10) {
            break None;
        }
    };
    let took = started.elapsed();
    eprintln!(
        "{} flood connections written; correct login from 127.0.0.3: {login:?} after {took:?} \
         and {} closed attempt(s) (one verification: {verification:?})",
        flood.len(),
        answers.len()
    );
    assert_eq!(login, Some(200), "no login within 10 s behind the flood");
    assert!(
        took <= verification * 10 + Duration::from_secs(1),
        "the login took {took:?}"
    );
}

/// 60 requests from 127.0.0.2 with wrong passwords, each connection closed 10 ms after its
/// request: the checks they started run to their end holding their pool place and their
/// address's turn, so the address runs one bcrypt at a time (one thread). A closed connection
/// freed both while its bcrypt ran on, and the next started another: 286 threads in a review.
#[test]
fn clients_that_hang_up_do_not_start_more_checks_than_the_pool() {
    let (hash, verification) = calibrated_hash("s3cret");
    let (agent, _dir) = start(&hash);
    std::thread::sleep(Duration::from_millis(1500));
    let before = threads(&agent);
    let pool = std::thread::available_parallelism()
        .map_or(2, std::num::NonZeroUsize::get)
        .clamp(2, 16) as u64;
    let mut most = before;
    for i in 0..60 {
        let mut stream = connect_from([127, 0, 0, 2], &agent.address);
        send(&mut stream, "prometheus", &format!("wrong-{i}"));
        std::thread::sleep(Duration::from_millis(10));
        drop(stream);
        most = most.max(threads(&agent));
    }
    let sixty = Instant::now();
    while sixty.elapsed() < verification * 3 {
        most = most.max(threads(&agent));
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("threads: {before} before, at most {most} during (pool {pool})");
    // One address: one check at a time (one thread), whatever the pool; the bound allows the
    // pool and one thread of slack for the blocking pool's hand-over (6 with a pool of 2 here,
    // 63 before the fix).
    assert!(
        most <= before + pool + 1,
        "{most} threads against {before} before: one address ran several checks at once \
         (pool {pool})"
    );
}

/// `/healthz` answers without credentials (a kubelet's probes send none); `/metrics` does not.
#[test]
fn health_needs_no_credentials_and_metrics_do() {
    let (hash, _) = calibrated_hash("s3cret");
    let (agent, _dir) = start(&hash);
    std::thread::sleep(Duration::from_millis(1500));
    let get = |path: &str| {
        let mut stream = connect_from([127, 0, 0, 1], &agent.address);
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        status(&mut stream, Duration::from_secs(10))
    };
    assert_eq!(get("/healthz"), 200);
    assert_eq!(get("/metrics"), 401);
    assert_eq!(get("/snapshot"), 401);
}
