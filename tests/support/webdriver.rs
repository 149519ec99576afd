//! A small W3C WebDriver client over the hyper-util client the tests already use,
//! driving Debian's headless Chromium through `chromedriver`: sessions, navigation,
//! scripts, elements, window size and screenshots, no more.
//!
//! Waiting is done by the browser, not by the test: [`Browser::wait_for`] runs an
//! asynchronous script that checks its condition at once and again at every change
//! of the document (a `MutationObserver`), and answers when it holds; WebDriver's
//! script timeout is the deadline. The test never sleeps.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

/// The flags Chromium needs on this kind of machine (see the CI notes): headless,
/// no sandbox as root, and nothing that reaches for the network by itself.
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
];

/// The first of `names` found on `PATH`.
pub fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    })
}

/// A WebDriver element reference.
#[derive(Debug, Clone)]
pub struct Element(String);

/// One Chromium session, and the chromedriver that runs it.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    profile: PathBuf,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl Browser {
    /// Starts chromedriver on a port it picks, and a headless Chromium session with
    /// a fresh profile and a `width`×`height` window.
    pub async fn start(
        chromium: &Path,
        chromedriver: &Path,
        width: u32,
        height: u32,
    ) -> Result<Self, String> {
        let mut driver = Command::new(chromedriver)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", chromedriver.display()))?;
        let port = match driver.stdout.take().map(read_port) {
            Some(Ok(port)) => port,
            Some(Err(e)) => {
                let _ = driver.kill();
                let _ = driver.wait();
                return Err(e);
            }
            None => return Err("chromedriver has no stdout".into()),
        };
        let profile =
            std::env::temp_dir().join(format!("seawall-chromium-{}-{port}", std::process::id()));
        let mut args: Vec<String> = FLAGS.iter().map(|f| (*f).to_owned()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.push(format!("--window-size={width},{height}"));
        let mut browser = Self {
            driver,
            port,
            session: String::new(),
            profile,
            http: Client::builder(TokioExecutor::new()).build_http(),
        };
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            "goog:chromeOptions": {"binary": chromium.display().to_string(), "args": args},
        }}});
        let created = browser.raw("POST", "/session", Some(caps)).await?;
        browser.session = created["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no session id in {created}"))?
            .to_owned();
        Ok(browser)
    }

    async fn raw(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = http::Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1:{}{path}", self.port))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        let res = self
            .http
            .request(req)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = res.status();
        let bytes = res
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        let value = value.get("value").cloned().unwrap_or(Value::Null);
        if status.is_success() {
            Ok(value)
        } else {
            Err(format!("{method} {path}: {status}: {value}"))
        }
    }

    async fn command(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let path = format!("/session/{}{path}", self.session);
        self.raw(method, &path, body).await
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) -> Result<(), String> {
        self.command("POST", "/url", Some(json!({ "url": url })))
            .await
            .map(drop)
    }

    /// Runs `body` (a function body; `arguments` are `args`) and gives what it returns.
    pub async fn execute(&self, body: &str, args: Value) -> Result<Value, String> {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": body, "args": args})),
        )
        .await
    }

    /// Waits until `condition` (a JavaScript expression, `arg` in scope) is truthy,
    /// checked at once and at every change of the document, and gives its value;
    /// an error naming `what` and the page's text after `timeout`.
    pub async fn wait_for(
        &self,
        what: &str,
        condition: &str,
        arg: Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.command("POST", "/timeouts", Some(json!({ "script": ms })))
            .await?;
        let script = format!(
            "const done = arguments[arguments.length - 1];
             const arg = arguments[0];
             const check = () => {{ try {{ return ({condition}); }} catch (e) {{ return null; }} }};
             const first = check();
             if (first) {{ done(first); return; }}
             const observer = new MutationObserver(() => {{
               const v = check();
               if (v) {{ observer.disconnect(); done(v); }}
             }});
             observer.observe(document, {{subtree: true, childList: true, characterData: true, attributes: true}});"
        );
        match self
            .command(
                "POST",
                "/execute/async",
                Some(json!({"script": script, "args": [arg]})),
            )
            .await
        {
            Ok(v) => Ok(v),
            Err(e) => {
                let text = self
                    .execute(
                        "return document.body ? document.body.innerText : '';",
                        json!([]),
                    )
                    .await
                    .unwrap_or_default();
                Err(format!(
                    "waited {timeout:?} for {what}: {e}\n--- page text ---\n{}",
                    text.as_str().unwrap_or_default()
                ))
            }
        }
    }

    /// The element `css` selects.
    pub async fn find(&self, css: &str) -> Result<Element, String> {
        let v = self
            .command(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .map(|id| Element(id.to_owned()))
            .ok_or_else(|| format!("no element id for {css}: {v}"))
    }

    /// Clicks `element` as a user would (it must be visible and enabled).
    pub async fn click(&self, element: &Element) -> Result<(), String> {
        self.command(
            "POST",
            &format!("/element/{}/click", element.0),
            Some(json!({})),
        )
        .await
        .map(drop)
    }

    /// Types `text` into `element`.
    pub async fn type_into(&self, element: &Element, text: &str) -> Result<(), String> {
        self.command(
            "POST",
            &format!("/element/{}/value", element.0),
            Some(json!({ "text": text })),
        )
        .await
        .map(drop)
    }

    /// Resizes the window.
    pub async fn resize(&self, width: u32, height: u32) -> Result<(), String> {
        self.command(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await
        .map(drop)
    }

    /// Resizes the window so that the page's viewport is `width`×`height` CSS
    /// pixels (the window's own frame, even headless, takes some of its size).
    pub async fn viewport(&self, width: u32, height: u32) -> Result<(), String> {
        let frame = self
            .execute(
                "return [outerWidth - innerWidth, outerHeight - innerHeight];",
                json!([]),
            )
            .await?;
        let extra = |i: usize| frame[i].as_u64().and_then(|v| u32::try_from(v).ok());
        let (dx, dy) = extra(0)
            .zip(extra(1))
            .ok_or(format!("window frame {frame}"))?;
        self.resize(width + dx, height + dy).await
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Result<Vec<u8>, String> {
        let v = self.command("GET", "/screenshot", None).await?;
        decode_base64(v.as_str().ok_or("screenshot is not a string")?)
    }

    /// Ends the session (Chromium exits) and chromedriver.
    pub async fn quit(mut self) {
        let _ = self.command("DELETE", "", None).await;
        self.session.clear();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // A test that failed half-way still closes Chromium: a blocking DELETE on a
        // plain socket, since no runtime can be awaited in drop.
        if !self.session.is_empty() {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = write!(
                    s,
                    "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    self.session
                );
                let _ = s.read_to_end(&mut Vec::new());
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// Reads chromedriver's start-up lines until it names its port.
fn read_port(stdout: std::process::ChildStdout) -> Result<u16, String> {
    const MARK: &str = "started successfully on port ";
    let mut reader = BufReader::new(stdout);
    let mut seen = String::new();
    loop {
        let mut line = Vec::new();
        let n = reader
            .read_until(b'.', &mut line)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err(format!(
                "chromedriver exited before naming its port: {seen}"
            ));
        }
        seen.push_str(&String::from_utf8_lossy(&line));
        if let Some(at) = seen.find(MARK) {
            let digits: String = seen[at + MARK.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if seen[at + MARK.len() + digits.len()..].starts_with('.') {
                // Keep draining its output so that it never blocks on a full pipe.
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut reader, &mut std::io::sink());
                });
                return digits.parse().map_err(|e| format!("port {digits}: {e}"));
            }
        }
    }
}

/// Standard base64 (WebDriver's screenshot encoding).
pub fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
    {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("not base64: {:?}", c as char)),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

/// Width and height from a PNG's header, checking its signature.
pub fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if png.len() < 24 || &png[..8] != SIGNATURE || &png[12..16] != b"IHDR" {
        return None;
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    Some((be(&png[16..20]), be(&png[20..24])))
}
