//! An agent (`relay-metrics serve`) on a free loopback port, spoken to over HTTP/1.1 with plain
//! sockets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{binary, Reaped};

/// A started agent: the child, its address and every line it has written on stderr (also
/// echoed on the test's stderr, so a failing test shows them).
pub struct Agent {
    pub child: Reaped,
    pub address: String,
    pub lines: Arc<Mutex<Vec<String>>>,
}

impl Agent {
    /// Waits up to `timeout` for a stderr line containing `needle`, written at any time since
    /// the start; returns it (`None` once the time is up).
    pub fn wait_line(&self, needle: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let found = self
                .lines
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .find(|line| line.contains(needle))
                .cloned();
            if found.is_some() || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits up to 20 s for a stderr line containing `needle`; returns it, or fails the test.
    pub fn expect_line(&self, needle: &str) -> String {
        self.wait_line(needle, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("the agent wrote no line with {needle:?} within 20 s"))
    }

    /// Waits up to `timeout` for the agent to exit; its status code (`None` if it did not).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.0.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `relay-metrics serve --listen 127.0.0.1:0 EXTRA...`, with `--interval-ms 200` unless EXTRA
/// sets it, and without the test's own `OTEL_*` variables (an exporter setting must come from
/// the test, not leak in from the environment).
pub fn agent_command(extra: &[&str]) -> Command {
    let mut command = Command::new(binary());
    command.args(["serve", "--listen", "127.0.0.1:0"]);
    if !extra.contains(&"--interval-ms") {
        command.args(["--interval-ms", "200"]);
    }
    command.args(extra);
    for (name, _) in std::env::vars() {
        if name.starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    command
}

/// Starts [`agent_command`]`(extra)` and waits for the line that names its address.
pub fn start_agent(extra: &[&str]) -> Agent {
    start_command(agent_command(extra))
}

/// Starts an agent from a prepared command (stdin closed, stdout discarded, stderr read) and waits up to 20 s
/// for the line that names its address.
pub fn start_command(mut command: Command) -> Agent {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("the agent starts: {error}"));
    let stderr = BufReader::new(child.stderr.take().unwrap_or_else(|| unreachable!()));
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            eprintln!("agent: {line}");
            sink.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(line);
        }
    });
    let mut agent = Agent {
        child: Reaped(child),
        address: String::new(),
        lines,
    };
    let line = agent
        .wait_line("serving http", Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the agent never said where it serves"));
    let start = line
        .find("://")
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        + 3;
    let rest = &line[start..];
    agent.address = rest[..rest.find('/').unwrap_or(rest.len())].to_string();
    agent
}

/// An HTTP response read with `Connection: close`.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// Header lines, names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `request` (a whole request head, and body if any) on a new connection and reads the
/// response until the server closes; every step must finish within `timeout` overall.
pub fn exchange(address: &str, request: &str, timeout: Duration) -> Result<Response, String> {
    let deadline = Instant::now() + timeout;
    let socket = address
        .parse()
        .map_err(|error| format!("address {address}: {error}"))?;
    let mut stream = TcpStream::connect_timeout(&socket, timeout)
        .map_err(|error| format!("connect: {error}"))?;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| "timed out".to_string())
    };
    stream
        .set_write_timeout(Some(left()?))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(request.as_bytes())
        .map_err(|error| format!("write: {error}"))?;
    let mut raw = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        stream
            .set_read_timeout(Some(left()?))
            .map_err(|e| e.to_string())?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(read) => raw.extend_from_slice(&chunk[..read]),
            Err(error) => return Err(format!("read after {} bytes: {error}", raw.len())),
        }
    }
    parse_response(&raw)
}

/// Parses one complete response (with a Content-Length body, a chunked one, or none).
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no complete head in {} bytes", raw.len()))?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut response = Response {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    };
    if response
        .header("transfer-encoding")
        .is_some_and(|coding| coding.eq_ignore_ascii_case("chunked"))
    {
        response.body = dechunk(&response.body)?;
    }
    Ok(response)
}

/// The payload of a `Transfer-Encoding: chunked` body.
fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let line_end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk without its size line")?;
        let size = std::str::from_utf8(&body[..line_end])
            .ok()
            .and_then(|size| usize::from_str_radix(size.trim(), 16).ok())
            .ok_or("a chunk size that is not hexadecimal")?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = body
            .get(line_end + 2..line_end + 2 + size)
            .ok_or("a chunk shorter than its size")?;
        out.extend_from_slice(chunk);
        body = body
            .get(line_end + 4 + size..)
            .ok_or("a chunk without its end")?;
    }
}

/// `GET path` with `Connection: close`, within 10 s.
pub fn get(address: &str, path: &str) -> Response {
    exchange(
        address,
        &format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
        Duration::from_secs(10),
    )
    .unwrap_or_else(|error| panic!("GET {path}: {error}"))
}

/// Waits until the agent has published its first snapshot.
pub fn wait_ready(address: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while get(address, "/metrics").status != 200 {
        assert!(Instant::now() < deadline, "no snapshot published in time");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Raises this process's open-file soft limit to its hard limit (no privilege needed) and
/// returns it, so a test can hold many connections.
pub fn raise_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((1024, 1024));
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}

/// A free loopback address (bound and released).
pub fn free_address() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    probe
        .local_addr()
        .unwrap_or_else(|e| panic!("{e}"))
        .to_string()
}

/// The agent's latest snapshot (`GET /snapshot`, which must answer 200).
pub fn snapshot(agent: &Agent) -> serde_json::Value {
    let response = get(&agent.address, "/snapshot");
    assert_eq!(response.status, 200);
    serde_json::from_str(&response.text()).unwrap_or_else(|error| panic!("/snapshot: {error}"))
}

/// A snapshot's sequence number.
pub fn sequence(snapshot: &serde_json::Value) -> u64 {
    snapshot["extensions"]["collector"]["sequence"]
        .as_u64()
        .unwrap_or_else(|| panic!("no extensions.collector.sequence"))
}

/// The first snapshot whose sequence is at least `at` (within 60 s: a debug build on a loaded
/// machine with thousands of processes takes a while per snapshot).
pub fn snapshot_from(agent: &Agent, at: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let response = get(&agent.address, "/snapshot");
        // 503 until the first snapshot.
        if response.status == 200 {
            let snapshot: serde_json::Value = serde_json::from_str(&response.text())
                .unwrap_or_else(|error| panic!("/snapshot: {error}"));
            if sequence(&snapshot) >= at {
                return snapshot;
            }
        }
        assert!(Instant::now() < deadline, "no snapshot {at} within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// No line of the agent's stderr is a warning or an error.
pub fn assert_quiet(agent: &Agent) {
    let lines = agent
        .lines
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let loud: Vec<&String> = lines
        .iter()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .collect();
    assert!(loud.is_empty(), "warnings or errors: {loud:?}");
}

/// A Unix socket at `path` that accepts and then hangs (never answers), or answers `garbage`
/// to whatever it is sent, until the test ends: a runtime API that misbehaves.
pub fn fake_api_socket(path: &std::path::Path, garbage: Option<&'static str>) {
    let listener = std::os::unix::net::UnixListener::bind(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if let Some(answer) = garbage {
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = stream.write_all(answer.as_bytes());
            } else {
                held.push(stream);
            }
        }
    });
}

/// The series of an exposition that carry `label="value"`.
pub fn series_with<'a>(exposition: &'a str, label: &str, value: &str) -> Vec<&'a str> {
    let needle = format!("{label}=\"{value}\"");
    exposition
        .lines()
        .filter(|line| !line.starts_with('#') && line.contains(&needle))
        .collect()
}

/// Scrapes `/metrics` every 200 ms until `done` holds (returns that exposition) or `timeout`
/// passes (fails with `what` and the last exposition's series that carry `label="value"`).
pub fn scrape_until(
    address: &str,
    timeout: Duration,
    what: &str,
    (label, value): (&str, &str),
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let text = get(address, "/metrics").text();
        if done(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {timeout:?}; the series with {label}={value:?}:\n{}",
            series_with(&text, label, value).join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sampling goes on in each agent (sampling every 100 ms) while its runtime API misbehaves:
/// over 6 s each takes snapshots throughout, not one after a stall, and logs no warning.
/// `agents`: each with what its case is, for the failure message.
pub fn assert_sampling_goes_on(agents: &[(&Agent, &str)]) {
    let first: Vec<u64> = agents
        .iter()
        .map(|(agent, _)| sequence(&snapshot(agent)))
        .collect();
    std::thread::sleep(Duration::from_secs(6));
    for ((agent, case), first) in agents.iter().zip(first) {
        let taken = sequence(&snapshot(agent)) - first;
        assert!(
            taken >= 4,
            "{case}: {taken} snapshots in 6 s at a 100 ms period"
        );
        assert_quiet(agent);
    }
}
