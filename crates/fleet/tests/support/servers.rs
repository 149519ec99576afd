//! `redis-server` processes in the shapes operators run: a replica, a sentinel.
//! Each on a free loopback port, with a directory of its own (removed on drop),
//! killed on drop. Tests start them after a [`RedisServer`] did, so the binary
//! is known to be there.
//!
//! [`RedisServer`]: seawall_test_support::RedisServer

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// One `redis-server` process (a data node or a sentinel).
#[derive(Debug)]
pub struct Proc {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Proc {
    /// A data node on a free port with `extra` arguments (e.g. `--replicaof`).
    pub fn node(extra: &[&str]) -> Proc {
        Self::start(|port, _| {
            let mut args: Vec<String> = [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                "",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
            args.extend(extra.iter().map(|s| (*s).to_owned()));
            (args, "Ready to accept connections")
        })
    }

    /// A data node that speaks TLS only, on a free port, with this CA, server
    /// certificate and key (PEM), asking clients for a certificate of that CA.
    pub fn tls_node(ca: &str, cert: &str, key: &str) -> Proc {
        Self::start(|port, dir| {
            let file = |name: &str, pem: &str| {
                let path = dir.join(name);
                std::fs::write(&path, pem).expect("write a certificate");
                path.display().to_string()
            };
            let args = vec![
                "--port".to_owned(),
                "0".to_owned(),
                "--tls-port".to_owned(),
                port.to_string(),
                "--bind".to_owned(),
                "127.0.0.1".to_owned(),
                "--save".to_owned(),
                String::new(),
                "--appendonly".to_owned(),
                "no".to_owned(),
                "--logfile".to_owned(),
                String::new(),
                "--tls-cert-file".to_owned(),
                file("server.crt", cert),
                "--tls-key-file".to_owned(),
                file("server.key", key),
                "--tls-ca-cert-file".to_owned(),
                file("ca.crt", ca),
                "--tls-auth-clients".to_owned(),
                "yes".to_owned(),
            ];
            (args, "Ready to accept connections")
        })
    }

    /// A sentinel on a free port watching `master` at `127.0.0.1:primary`, with
    /// a quorum of 1 and a 1 s down-after.
    pub fn sentinel(master: &str, primary: u16) -> Proc {
        Self::start(|port, dir| {
            let conf = dir.join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\nlogfile \"\"\ndir {}\n\
                 sentinel monitor {master} 127.0.0.1 {primary} 1\n\
                 sentinel down-after-milliseconds {master} 1000\n\
                 sentinel failover-timeout {master} 5000\n",
                dir.display()
            );
            std::fs::write(&conf, text).expect("write the sentinel's config");
            (
                vec![conf.display().to_string(), "--sentinel".to_owned()],
                "+monitor master",
            )
        })
    }

    fn start(args: impl Fn(u16, &PathBuf) -> (Vec<String>, &'static str)) -> Proc {
        static N: AtomicU64 = AtomicU64::new(0);
        for _ in 0..8 {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .expect("a free port");
            let dir = std::env::temp_dir().join(format!(
                "seawall-fleet-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&dir).expect("a directory for the server");
            let (args, ready) = args(port, &dir);
            let mut child = Command::new("redis-server")
                .args(&args)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server could not start");
            let stdout = child.stdout.take().expect("piped");
            let mut lines = BufReader::new(stdout).lines();
            let up = lines
                .by_ref()
                .map_while(Result::ok)
                .any(|line| line.contains(ready));
            // Keep draining its log, or a full pipe would stall the server.
            std::thread::spawn(move || lines.for_each(drop));
            if up {
                return Proc { child, port, dir };
            }
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&dir);
        }
        panic!("redis-server did not come up on any of 8 free ports");
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Its address as `host:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
