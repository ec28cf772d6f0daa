//! A running `otlp_receiver.py`: an OTLP receiver whose decoding is PyPI opentelemetry-proto's.

use std::io::{BufRead, BufReader};
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
