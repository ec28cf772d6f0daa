//! `--web-config-file`: TLS and basic auth on the agent's endpoint, checked with clients nobody
//! here wrote (curl with OpenSSL). The certificates are made by the test with the openssl CLI, the
//! bcrypt hash with the system's libcrypt (Python's `crypt`), both installed by
//! scripts/install-deps.sh.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::path::Path;
use std::process::Command;

fn run(program: &str, args: &[&str], dir: &Path) {
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|error| panic!("{program}: {error}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

const EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

/// A self-signed server certificate for 127.0.0.1 with a new key, in `dir` as `STEM.crt` and
/// `STEM.key`.
fn server_certificate(dir: &Path, stem: &str) {
    let (key, crt) = (format!("{stem}.key"), format!("{stem}.crt"));
    let mut server = vec!["req", "-x509", "-days", "1"];
    server.extend(EC_KEY);
    server.extend([
        "-keyout",
        &key,
        "-out",
        &crt,
        "-subj",
        "/CN=relay-metrics-test",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
    ]);
    run("openssl", &server, dir);
}

/// A server certificate for 127.0.0.1, and a client CA with one client certificate.
fn certificates(dir: &Path) {
    let key = EC_KEY;
    server_certificate(dir, "server");
    let mut ca = vec!["req", "-x509", "-days", "1"];
    ca.extend(key);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=relay-metrics-test-ca",
    ]);
    run("openssl", &ca, dir);
    let mut request = vec!["req"];
    request.extend(key);
    request.extend([
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=scraper",
    ]);
    run("openssl", &request, dir);
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    run(
        "openssl",
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            "client.crt",
            "-extfile",
            "client.ext",
        ],
        dir,
    );
}

/// A bcrypt hash of `password` made by libcrypt.
fn bcrypt_hash(password: &str) -> String {
    let output = Command::new("python3")
        .args([
            "-W",
            "ignore",
            "-c",
            "import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))",
            password,
        ])
        .output()
        .unwrap();
    let hash = String::from_utf8(output.stdout).unwrap().trim().to_string();
    assert!(
        hash.starts_with("$2"),
        "libcrypt made no bcrypt hash: {hash:?}"
    );
    hash
}

/// curl's HTTP status for `url` with extra arguments (0 when the request failed).
fn curl(url: &str, args: &[&str], dir: &Path) -> u16 {
    let output = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .args(args)
        .arg(url)
        .current_dir(dir)
        .output()
        .expect("curl (installed by scripts/install-deps.sh)");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

#[test]
#[ignore = "tools: openssl, curl, python3"]
fn tls_and_basic_auth_from_an_exporter_toolkit_web_config() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let hash = bcrypt_hash("s3cret");
    std::fs::write(
        dir.path().join("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    )
    .unwrap();
    let web = dir.path().join("web.yml").display().to_string();
    let agent = common::start_agent(&["--scope", "global", "--web-config-file", &web]);
    let url = format!("https://{}/metrics", agent.address);
    let d = dir.path();
    let trusted = ["--cacert", "server.crt"];
    // The first snapshot may take a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while curl(
        &url,
        &[&trusted[..], &["-u", "prometheus:s3cret"]].concat(),
        d,
    ) != 200
    {
        assert!(
            std::time::Instant::now() < deadline,
            "never served over TLS"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(curl(&url, &trusted, d), 401);
    assert_eq!(
        curl(
            &url,
            &[&trusted[..], &["-u", "prometheus:wrong"]].concat(),
            d
        ),
        401
    );
    assert_eq!(
        curl(&url, &[&trusted[..], &["-u", "nobody:s3cret"]].concat(), d),
        401
    );
    // An untrusted certificate is refused by the client; plain HTTP gets no answer.
    assert_eq!(curl(&url, &["-u", "prometheus:s3cret"], d), 0);
    assert_eq!(
        curl(
            &format!("http://{}/metrics", agent.address),
            &["-u", "prometheus:s3cret"],
            d
        ),
        0
    );
}

#[test]
#[ignore = "tools: openssl, curl"]
fn a_client_ca_requires_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    std::fs::write(
        dir.path().join("web.yml"),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_ca_file: ca.crt\n",
    )
    .unwrap();
    let web = dir.path().join("web.yml").display().to_string();
    let agent = common::start_agent(&["--scope", "global", "--web-config-file", &web]);
    let url = format!("https://{}/healthz", agent.address);
    let d = dir.path();
    let with_cert = [
        "--cacert",
        "server.crt",
        "--cert",
        "client.crt",
        "--key",
        "client.key",
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while curl(&url, &with_cert, d) != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "never served with a client certificate"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(curl(&url, &["--cacert", "server.crt"], d), 0);
}

#[test]
fn a_web_config_with_an_unsupported_key_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, "http_server_config:\n  http2: true\n").unwrap();
    let output = Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--scope", "global"])
        .arg("--web-config-file")
        .arg(&web)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("web config") && stderr.contains("http_server_config"),
        "{stderr}"
    );
}

/// A TLS connection that never starts its handshake does not hold a stop: SIGTERM ends the
/// agent at once (it waited the whole 5 s shutdown grace: 5.05 s in a review).
#[test]
#[ignore = "tools: openssl"]
fn a_connection_that_never_starts_tls_does_not_delay_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    std::fs::write(
        dir.path().join("web.yml"),
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n",
    )
    .unwrap();
    let web = dir.path().join("web.yml").display().to_string();
    let mut agent = common::start_agent(&["--scope", "global", "--web-config-file", &web]);
    let silent = std::net::TcpStream::connect(&agent.address).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(agent.child.0.id()).unwrap());
    let started = std::time::Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = agent
        .wait_exit(std::time::Duration::from_secs(10))
        .expect("the agent exits");
    let took = started.elapsed();
    eprintln!("SIGTERM to exit with a connection before its TLS handshake: {took:?}");
    assert_eq!(status.code(), Some(0));
    assert!(took < std::time::Duration::from_secs(2), "{took:?}");
    drop(silent);
}

/// Certificates renewed while the agent runs are served without a restart, as exporter-toolkit
/// serves them: here as a Kubernetes secret volume renews them, by pointing a link at a new
/// directory. A renewal seen half done (a certificate without its key) keeps the last pair.
#[test]
#[ignore = "tools: openssl, curl"]
fn renewed_certificates_are_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for version in ["first", "renewed"] {
        std::fs::create_dir(d.join(version)).unwrap();
        server_certificate(&d.join(version), "tls");
        std::fs::copy(
            d.join(version).join("tls.crt"),
            d.join(format!("{version}.crt")),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink("first", d.join("data")).unwrap();
    std::fs::write(
        d.join("web.yml"),
        "tls_server_config:\n  cert_file: data/tls.crt\n  key_file: data/tls.key\n",
    )
    .unwrap();
    let web = d.join("web.yml").display().to_string();
    let agent = common::start_agent(&["--scope", "global", "--web-config-file", &web]);
    let url = format!("https://{}/healthz", agent.address);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while curl(&url, &["--cacert", "first.crt"], d) != 200 {
        assert!(std::time::Instant::now() < deadline, "never served");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // The new certificate over the old one, its key not yet written: no pair, the last stays.
    std::fs::copy(d.join("renewed/tls.crt"), d.join("first/tls.crt")).unwrap();
    agent.expect_line("TLS files changed and cannot be used");
    assert_eq!(curl(&url, &["--cacert", "first.crt"], d), 200);
    assert_eq!(curl(&url, &["--cacert", "renewed.crt"], d), 0);

    // The link swapped to the renewed pair, as the kubelet does.
    std::os::unix::fs::symlink("renewed", d.join("data.new")).unwrap();
    std::fs::rename(d.join("data.new"), d.join("data")).unwrap();
    agent.expect_line("TLS files changed: new connections use them");
    assert_eq!(curl(&url, &["--cacert", "renewed.crt"], d), 200);
    assert_eq!(curl(&url, &["--cacert", "first.crt"], d), 0);
}
