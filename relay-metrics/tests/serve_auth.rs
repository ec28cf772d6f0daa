//! Basic auth under a flood (`--web-config-file` with `basic_auth_users`, plain HTTP on
//! loopback): one address sending many wrong passwords does not delay another address's first
//! login beyond one verification; a repeated wrong password is answered without bcrypt; an
//! unknown user costs as much as a known one. The second source address is 127.0.0.2 (all of
//! 127/8 is loopback on Linux), bound before connecting.

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
    let credentials =
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {credentials}\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let agent = common::start_agent(&[
        "--scope",
        "global",
        "--web-config-file",
        web.to_str().unwrap(),
    ]);
    (agent, dir)
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
