//! A running `otlp_receiver.py`: an OTLP receiver whose decoding is PyPI opentelemetry-proto's;
//! and [`receive_requests`], the raw requests an agent exports over HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use serde_json::Value;

use super::{venv_python, Reaped};

/// A running `otlp_receiver.py` and the requests it has decoded.
pub struct OtlpReceiver {
    _child: Reaped,
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    requests: Receiver<Value>,
}

impl OtlpReceiver {
    /// Starts the receiver with `args` (`--protocol grpc`, …) and waits for its port.
    pub fn start(args: &[&str]) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_receiver.py");
        let mut child = Command::new(venv_python())
            .arg(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|error| panic!("the receiver starts: {error}"));
        let mut stdout = BufReader::new(child.stdout.take().unwrap_or_else(|| unreachable!()));
        let child = Reaped(child);
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .unwrap_or_else(|error| panic!("the receiver's first line: {error}"));
        let port = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("receiver said {line:?}"));
        let (sender, requests) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let request = serde_json::from_str(&line)
                    .unwrap_or_else(|error| panic!("receiver line {line:?}: {error}"));
                let _ = sender.send(request);
            }
        });
        Self {
            _child: child,
            port,
            requests,
        }
    }

    /// The next decoded request, within 20 s.
    pub fn next(&self) -> Value {
        match self.requests.recv_timeout(Duration::from_secs(20)) {
            Ok(request) => request,
            Err(RecvTimeoutError::Timeout) => panic!("no export within 20 s"),
            Err(RecvTimeoutError::Disconnected) => panic!("the receiver exited"),
        }
    }

    /// Whether no request arrives within `wait`.
    pub fn none_within(&self, wait: Duration) -> bool {
        matches!(
            self.requests.recv_timeout(wait),
            Err(RecvTimeoutError::Timeout)
        )
    }
}

/// Receives `count` HTTP requests on `listener` (within `within` in all), answering 200 to
/// each; returns the head and body of each.
pub fn receive_requests(
    listener: TcpListener,
    count: usize,
    within: Duration,
) -> Vec<(String, Vec<u8>)> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let requests: Vec<(String, Vec<u8>)> = (0..count)
            .map(|_| {
                let (stream, _) = listener
                    .accept()
                    .unwrap_or_else(|error| panic!("accepting a request: {error}"));
                receive_request(stream)
            })
            .collect();
        let _ = sender.send(requests);
    });
    receiver
        .recv_timeout(within)
        .unwrap_or_else(|_| panic!("the agent did not send {count} requests within {within:?}"))
}

/// Reads one request (head and `Content-Length` body) and answers 200.
fn receive_request(mut stream: TcpStream) -> (String, Vec<u8>) {
    let failed = |error: std::io::Error| -> ! { panic!("receiving a request: {error}") };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap_or_else(|error| failed(error));
    let mut request = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let read = stream
            .read(&mut chunk)
            .unwrap_or_else(|error| failed(error));
        assert!(read > 0, "the request ended inside its head");
        request.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&request[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(": ")?;
            name.eq_ignore_ascii_case("content-length").then_some(value)
        })
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length header in {head}"));
    while request.len() < head_end + length {
        let read = stream
            .read(&mut chunk)
            .unwrap_or_else(|error| failed(error));
        assert!(read > 0, "the request ended inside its body");
        request.extend_from_slice(&chunk[..read]);
    }
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .unwrap_or_else(|error| failed(error));
    (head, request[head_end..].to_vec())
}
