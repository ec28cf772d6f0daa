//! A real Prometheus server (Debian's `prometheus`, installed by scripts/install-deps.sh) that
//! scrapes agents every second, and its instant-query API.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{free_address, Reaped};

/// A Prometheus server with its own data directory, stopped when dropped.
pub struct Prometheus {
    /// The address of its web API.
    pub web: String,
    _server: Reaped,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts a server that scrapes `targets` (`host:port`) every second.
    pub fn start(targets: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
        let config = dir.path().join("prometheus.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: relay\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", config.display()));
        let web = free_address();
        let server = Reaped(
            Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address={web}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "prometheus (Debian package prometheus, installed by \
                         scripts/install-deps.sh): {e}"
                    )
                }),
        );
        Self {
            web,
            _server: server,
            _dir: dir,
        }
    }

    /// The `data.result` of an instant query, retried until Prometheus answers (up to 30 s).
    pub fn query(&self, promql: &str) -> Vec<Value> {
        let web = &self.web;
        let path = format!("/api/v1/query?query={}", encode(promql));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut stream) = TcpStream::connect(web) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = write!(
                    stream,
                    "GET {path} HTTP/1.1\r\nHost: {web}\r\nConnection: close\r\n\r\n"
                );
                let mut response = String::new();
                let _ = stream.read_to_string(&mut response);
                if let Some((_, body)) = response.split_once("\r\n\r\n") {
                    // The body may be chunked; the JSON object is between the outer braces.
                    if let (Some(start), Some(end)) = (body.find('{'), body.rfind('}')) {
                        let answer: Value =
                            serde_json::from_str(&body[start..=end]).unwrap_or(Value::Null);
                        if answer["status"] == "success" {
                            let result = answer["data"]["result"].as_array().cloned();
                            return result.unwrap_or_else(|| panic!("no result: {answer}"));
                        }
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus did not answer {promql}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The first series' value of an instant query, or `None` while it has no series yet.
    pub fn first_value(&self, promql: &str) -> Option<f64> {
        self.query(promql)
            .first()
            .and_then(|r| r["value"][1].as_str())
            .map(|v| v.parse().unwrap_or_else(|e| panic!("value {v}: {e}")))
    }
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
