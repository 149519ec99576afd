//! A `redis-server` of a test's own: a free loopback port, no persistence, killed
//! when dropped, so a test that kills, flushes or restarts its server disturbs no
//! other test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Ports tried before giving up (another process may take a port between our
/// probe of it and the server's bind).
const PORT_ATTEMPTS: usize = 8;

/// Whether a missing `redis-server` fails the test (CI) instead of skipping it.
fn required() -> bool {
    std::env::var("SEAWALL_REQUIRE_REDIS").is_ok_and(|v| v == "1")
}

/// One `redis-server` process on 127.0.0.1.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
}

impl RedisServer {
    /// A fresh server, or `None` (after one loud line on stderr) when
    /// `redis-server` is not installed and `SEAWALL_REQUIRE_REDIS=1` is not set.
    pub fn start(test: &str) -> Option<Self> {
        match Self::spawn() {
            Ok(Some(server)) => Some(server),
            Ok(None) => {
                assert!(
                    !required(),
                    "SEAWALL_REQUIRE_REDIS=1 but redis-server is not on PATH"
                );
                // libtest hides the output of passing tests, but not stderr written directly.
                let _ = writeln!(
                    std::io::stderr(),
                    "!!! {test}: DID NOT RUN: redis-server is not on PATH \
                     (install it, e.g. `apt-get install redis-server`, to run the Redis tests; \
                     SEAWALL_REQUIRE_REDIS=1 makes its absence fail them)"
                );
                None
            }
            Err(e) => panic!("could not start redis-server: {e}"),
        }
    }

    /// A fresh server on a free port once it answers, or `Ok(None)` when
    /// `redis-server` is not on PATH; an error when it would not come up.
    pub fn spawn() -> std::io::Result<Option<Self>> {
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            match spawn(port) {
                Ok(Some(child)) => {
                    return Ok(Some(Self {
                        child: Some(child),
                        port,
                    }))
                }
                // Exited before answering: most likely the port was taken meanwhile.
                Ok(None) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(format!(
            "redis-server did not come up on any of {PORT_ATTEMPTS} free ports"
        )))
    }

    /// The port it listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL to reach it.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (SIGKILL: no goodbye to its clients) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty (nothing is persisted).
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..PORT_ATTEMPTS {
            if let Ok(Some(child)) = spawn(self.port) {
                self.child = Some(child);
                return;
            }
        }
        panic!("redis-server did not come back on port {}", self.port);
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers, and
    /// what clients send meanwhile is applied on [`resume`](Self::resume).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a paused server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server is not running");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill(1) could not run");
        assert!(status.success(), "kill {signal} failed: {status}");
    }

    /// Runs one inline command and returns the first line of its answer.
    pub fn command(&self, command: &str) -> std::io::Result<String> {
        inline(self.port, command)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(data_dir(self.port));
    }
}

/// The working directory of the server on `port`, the same across its restarts.
fn data_dir(port: u16) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("seawall-redis-{}-{port}", std::process::id()))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// Spawns a server on `port` and waits until it says it is ready (its log line),
/// then checks that it answers PING. `Ok(None)`: it exited first (the port was
/// taken) and was reaped. Waiting reads the server's own output: no polling.
fn spawn(port: u16) -> std::io::Result<Option<Child>> {
    if port == 0 {
        return Ok(None);
    }
    // Its own working directory: a `SAVE`, a `DEBUG RELOAD` or a replica's sync
    // writes `dump.rdb` there, never into the crate under test.
    let dir = data_dir(port);
    std::fs::create_dir_all(&dir)?;
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--logfile", ""])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let Some(stdout) = child.stdout.take() else {
        let _ = child.kill();
        let _ = child.wait();
        return Ok(None);
    };
    let mut lines = BufReader::new(stdout).lines();
    // Ends with the output: the server exited before it was ready.
    let ready = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|line| line.contains("Ready to accept connections"));
    // Keep draining its log, or a full pipe would stall the server.
    std::thread::spawn(move || lines.for_each(drop));
    if ready && inline(port, "PING").is_ok_and(|r| r == "+PONG") {
        return Ok(Some(child));
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(None)
}

fn inline(port: u16, command: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("{command}\r\n").as_bytes())?;
    let mut buf = [0u8; 512];
    let mut got = Vec::new();
    while !got.ends_with(b"\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    Ok(text.lines().next().unwrap_or_default().to_owned())
}
