//! The incident dashboard in a real browser: Debian's headless Chromium, driven by
//! chromedriver, against the `axum_routes` example served on 127.0.0.1.
//!
//! Why WebDriver rather than `chromium --dump-dom --virtual-time-budget`: the page
//! keeps an event stream open, and a virtual time budget only runs out while no
//! request is pending, so the dump never comes (tried: it hangs); and a dump cannot
//! type a token, click a control or take a screenshot at a chosen moment. The
//! WebDriver client is a few hundred lines over the hyper-util client the tests
//! already use (`support/webdriver.rs`), so no dependency is added, and the browser
//! does the waiting: each wait is a script that answers when its condition holds,
//! with WebDriver's script timeout as the deadline. Nothing here sleeps.
//!
//! Without `chromium` and `chromedriver` on `PATH` the test says so in one line on
//! stderr and passes, unless `SEAWALL_REQUIRE_CHROMIUM` is set (CI sets it and
//! installs both).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "../examples/axum_routes.rs"]
mod example;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use seawall::admin::AdminToken;
use seawall::config::Policies;
use serde_json::{json, Value};
use webdriver::Browser;

const TOKEN: &str = "dashboard-test-token-0123456789";
/// The promise: the page shows a trip within 3 s.
const SHOWN_WITHIN: Duration = Duration::from_secs(3);
/// How long a wait may take before the test gives up (not a promise of the page).
const PATIENCE: Duration = Duration::from_secs(20);

/// Chromium and chromedriver, or `None` (after saying so) when the test may pass
/// without them.
fn browser_programs() -> Option<(PathBuf, PathBuf)> {
    let chromium = webdriver::find_program(&["chromium", "chromium-browser", "google-chrome"]);
    let driver = webdriver::find_program(&["chromedriver"]);
    if let (Some(c), Some(d)) = (chromium, driver) {
        return Some((c, d));
    }
    let required = std::env::var_os("SEAWALL_REQUIRE_CHROMIUM").is_some();
    // Straight to stderr, past the test harness's capture: a skipped browser test
    // must be seen.
    let _ = writeln!(
        std::io::stderr(),
        "!!! SKIPPED the dashboard browser test: `chromium` and `chromedriver` are not both on PATH \
         (apt-get install chromium chromium-driver){}",
        if required {
            "; SEAWALL_REQUIRE_CHROMIUM is set, so this is a failure"
        } else {
            ""
        }
    );
    assert!(
        !required,
        "the dashboard browser test needs chromium and chromedriver"
    );
    None
}

/// The process's one Prometheus recorder (a global recorder can be installed once).
fn prometheus() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| PrometheusBuilder::new().install_recorder().unwrap())
        .clone()
}

/// The example, served by a runtime of its own, so that stopping it drops every
/// task and connection at once, as a crash or a restart would.
struct Server {
    runtime: Option<tokio::runtime::Runtime>,
    shop: SocketAddr,
    suppliers: SocketAddr,
}

impl Server {
    fn start(addr: SocketAddr) -> Self {
        // Built on another thread: a runtime cannot be started from inside one.
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            let running = runtime.block_on(async {
                let policies = Policies::load(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/examples/axum_routes.toml"
                ))
                .unwrap();
                let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
                let token = AdminToken::new(TOKEN).unwrap();
                example::start(&policies, listener, prometheus(), Some(token))
                    .await
                    .unwrap()
            });
            Self {
                runtime: Some(runtime),
                shop: running.shop,
                suppliers: running.suppliers,
            }
        })
        .join()
        .unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

type Client = hyper_util::client::legacy::Client<HttpConnector, Empty<Bytes>>;

async fn send(client: &Client, method: http::Method, url: String) -> (u16, String) {
    let req = http::Request::builder()
        .method(method)
        .uri(url)
        .body(Empty::new())
        .unwrap();
    let res = client.request(req).await.unwrap();
    let status = res.status().as_u16();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The text of a field of a policy's card.
fn field(policy: &str, name: &str) -> String {
    format!(
        "document.querySelector('[data-policy=\"{policy}\"] [data-field=\"{name}\"]')?.textContent"
    )
}

#[test]
fn the_dashboard_shows_an_outage_live_and_steers_the_policies_with_the_token() {
    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let server = Server::start(SocketAddr::from(([127, 0, 0, 1], 0)));
        let (shop, suppliers) = (server.shop, server.suppliers);
        let http: Client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .build_http();
        let browser = Browser::start(&chromium, &chromedriver, 1280, 800)
            .await
            .unwrap();
        browser.goto(&format!("http://{shop}/admin")).await.unwrap();
        browser.viewport(1280, 800).await.unwrap();

        // Live, every policy on the page, the freight breaker closed.
        browser
            .wait_for(
                "the freight breaker shown closed",
                &format!("{} === arg", field("freight", "breaker-state")),
                json!("closed"),
                PATIENCE,
            )
            .await
            .unwrap();
        let page = browser
            .execute(
                "return {
                   connection: document.getElementById('connection').dataset.state,
                   cards: [...document.querySelectorAll('.card')].map(c => c.dataset.policy),
                   groups: [...document.querySelectorAll('.group')].map(g => g.dataset.group),
                   controls: document.querySelectorAll('.control, [data-action], .controls').length,
                   unlock: !document.getElementById('unlock').hidden,
                   readOnly: document.getElementById('read-only').textContent,
                   // The stylesheet applied under the page's CSP: a card has its thick border.
                   border: getComputedStyle(document.querySelector('.card')).borderLeftWidth,
                 };",
                json!([]),
            )
            .await
            .unwrap();
        assert_eq!(page["connection"], "live", "{page}");
        assert_eq!(
            page["cards"],
            json!(["assistant", "freight", "recommendations"]),
            "{page}"
        );
        assert_eq!(
            page["groups"],
            json!(["language-model", "freight-supplier", "recommendations-service"]),
            "{page}"
        );
        assert_eq!(page["border"], "6px", "{page}");
        // Without a token the page is read-only: no control at all in the document.
        assert_eq!(page["controls"], 0, "{page}");
        assert_eq!(page["unlock"], true, "{page}");
        assert!(
            page["readOnly"].as_str().unwrap().starts_with("Read-only"),
            "{page}"
        );

        // The outage: the freight supplier fails until the breaker trips.
        send(
            &http,
            http::Method::POST,
            format!("http://{suppliers}/control/freight/failing"),
        )
        .await;
        let mut tripped = None;
        for _ in 0..30 {
            let sent = Instant::now();
            send(&http, http::Method::GET, format!("http://{shop}/quote/lisbon")).await;
            let (_, body) = send(
                &http,
                http::Method::GET,
                format!("http://{shop}/admin/policies/freight"),
            )
            .await;
            let snapshot: Value = serde_json::from_str(&body).unwrap();
            if snapshot["breaker"]["state"] == "open" {
                // The trip happened after this call was sent: measure from here.
                tripped = Some(sent);
                break;
            }
        }
        let tripped = tripped.expect("the freight breaker never opened");
        browser
            .wait_for(
                "the freight breaker shown open",
                &format!("{} === arg", field("freight", "breaker-state")),
                json!("open"),
                PATIENCE,
            )
            .await
            .unwrap();
        let shown = tripped.elapsed();
        assert!(
            shown <= SHOWN_WITHIN,
            "the page showed the trip after {shown:?}"
        );
        let card = browser
            .execute(
                &format!(
                    "return {{ health: {}, probe: {}, transition: {}, badge: document.querySelector('[data-policy=\"freight\"] [data-field=\"breaker-state\"]').dataset.state }};",
                    field("freight", "health"),
                    field("freight", "breaker-probe"),
                    field("freight", "breaker-transition"),
                ),
                json!([]),
            )
            .await
            .unwrap();
        assert_eq!(card["health"], "short-circuiting", "{card}");
        assert_eq!(card["badge"], "open", "{card}");
        assert!(
            card["probe"].as_str().unwrap().starts_with("next probe in"),
            "{card}"
        );
        assert!(
            card["transition"]
                .as_str()
                .unwrap()
                .starts_with("last transition: closed → open (failure rate)"),
            "{card}"
        );

        // A screenshot of the outage, kept for the record; checked below.
        let png = browser.screenshot().await.unwrap();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("outage-1280x800.png"), &png).unwrap();
        let size = webdriver::png_size(&png).expect("the screenshot is a PNG");

        // The token: the controls appear.
        let input = browser.find("#token").await.unwrap();
        browser.type_into(&input, TOKEN).await.unwrap();
        browser
            .click(&browser.find("#unlock-button").await.unwrap())
            .await
            .unwrap();
        browser
            .wait_for(
                "the controls",
                "document.querySelector('[data-policy=\"freight\"][data-action=\"breaker/reset\"]') && document.getElementById('revert')",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        let kept = browser
            .execute(
                "return { input: document.getElementById('token').value, url: location.href, \
                 stored: localStorage.length + sessionStorage.length };",
                json!([]),
            )
            .await
            .unwrap();
        assert_eq!(kept["input"], "", "{kept}");
        assert!(!kept["url"].as_str().unwrap().contains(TOKEN), "{kept}");
        assert_eq!(kept["stored"], 0, "{kept}");

        // A degradation floor through the page: choose the level, confirm, see it.
        browser
            .execute(
                "document.querySelector('[data-policy=\"assistant\"] select[data-field=\"floor-level\"]').value = 'canned';",
                json!([]),
            )
            .await
            .unwrap();
        browser
            .click(
                &browser
                    .find("[data-policy=\"assistant\"][data-action=\"degradation/set-floor\"]")
                    .await
                    .unwrap(),
            )
            .await
            .unwrap();
        confirm(&browser).await;
        browser
            .wait_for(
                "the floor shown",
                &format!("{}?.startsWith('canned')", field("assistant", "floor")),
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();

        // Reset: asked first, then sent; the result and the stream both show it closed.
        send(
            &http,
            http::Method::POST,
            format!("http://{suppliers}/control/freight/healthy"),
        )
        .await;
        browser
            .click(
                &browser
                    .find("[data-policy=\"freight\"][data-action=\"breaker/reset\"]")
                    .await
                    .unwrap(),
            )
            .await
            .unwrap();
        let question = confirm(&browser).await;
        assert!(question.contains("Reset the breaker of “freight”"), "{question}");
        let result = browser
            .wait_for(
                "the reset's result",
                "document.getElementById('result').dataset.ok === 'true' && document.getElementById('result').textContent",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        assert!(
            result.as_str().unwrap().contains("breaker now closed"),
            "{result}"
        );
        browser
            .wait_for(
                "the freight breaker shown closed after the reset",
                &format!("{} === arg", field("freight", "breaker-state")),
                json!("closed"),
                PATIENCE,
            )
            .await
            .unwrap();
        let (_, body) = send(
            &http,
            http::Method::GET,
            format!("http://{shop}/admin/policies/freight"),
        )
        .await;
        assert!(body.contains("\"state\": \"closed\""), "{body}");

        // On a phone's width nothing is cut off or needs sideways scrolling.
        browser.viewport(390, 844).await.unwrap();
        let fits = browser
            .wait_for(
                "the page laid out at a phone's width",
                "innerWidth <= 400 && document.documentElement.scrollWidth <= innerWidth \
                 && [...document.querySelectorAll('.card')].every(c => c.getBoundingClientRect().right <= innerWidth) \
                 && innerWidth",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        assert!(fits.as_u64().unwrap() <= 400);
        browser.viewport(1280, 800).await.unwrap();

        // The server goes away: the page says its data is stale. It comes back on
        // the same address: the page reconnects by itself and says it restarted.
        drop(server);
        browser
            .wait_for(
                "the page saying its data is stale",
                "document.getElementById('connection').dataset.state === 'stale' \
                 && !document.getElementById('stale').hidden \
                 && document.getElementById('stale').textContent",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        let server = Server::start(shop);
        browser
            .wait_for(
                "the page live again after the restart",
                "document.getElementById('connection').dataset.state === 'live' \
                 && document.getElementById('meta').textContent.includes('server restarted') \
                 && document.getElementById('stale').hidden",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        assert_eq!(server.shop, shop);

        // The outage screenshot is a picture of the page, not a blank: decoded by
        // the browser on a blank page of its own, its pixels counted.
        browser.goto("about:blank").await.unwrap();
        let stats = decode_in_browser(&browser, &base64_of(&png)).await;
        assert_eq!(
            (stats["width"].as_u64().unwrap(), stats["height"].as_u64().unwrap()),
            (u64::from(size.0), u64::from(size.1)),
            "{stats}"
        );
        assert_eq!(size, (1280, 800));
        // A blank page is one colour; this one has text, badges and charts.
        assert!(stats["colours"].as_u64().unwrap() >= 16, "{stats}");
        assert!(stats["commonest"].as_f64().unwrap() < 0.95, "{stats}");
        // The open breaker's badge: red on pale red, somewhere on the picture.
        assert!(stats["red"].as_u64().unwrap() >= 100, "{stats}");

        browser.quit().await;
        drop(server);
    });
    let _ = writeln!(
        std::io::stderr(),
        "dashboard browser test: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Accepts the page's confirmation dialog; its question.
async fn confirm(browser: &Browser) -> String {
    let question = browser
        .wait_for(
            "the confirmation",
            "document.getElementById('confirm').open && document.getElementById('confirm-text').textContent",
            json!(null),
            PATIENCE,
        )
        .await
        .unwrap();
    browser
        .click(&browser.find("#confirm-yes").await.unwrap())
        .await
        .unwrap();
    question.as_str().unwrap().to_owned()
}

fn base64_of(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The browser's own decoding of a PNG: its size, how many colours (to 4 bits a
/// channel), the share of the commonest, and how many strongly red pixels.
async fn decode_in_browser(browser: &Browser, b64: &str) -> Value {
    browser
        .wait_for(
            "the screenshot decoded",
            "window.__decoded || (window.__decoding ||= (() => {
               const img = new Image();
               img.onload = () => {
                 const c = document.createElement('canvas');
                 c.width = img.width; c.height = img.height;
                 const g = c.getContext('2d');
                 g.drawImage(img, 0, 0);
                 const d = g.getImageData(0, 0, c.width, c.height).data;
                 const counts = new Map();
                 let red = 0;
                 for (let i = 0; i < d.length; i += 4) {
                   const k = ((d[i] >> 4) << 8) | ((d[i + 1] >> 4) << 4) | (d[i + 2] >> 4);
                   counts.set(k, (counts.get(k) || 0) + 1);
                   if (d[i] > 170 && d[i + 1] < 90 && d[i + 2] < 90) red++;
                 }
                 const top = Math.max(...counts.values());
                 window.__decoded = { width: c.width, height: c.height, colours: counts.size,
                                      commonest: top / (c.width * c.height), red };
                 document.body.dataset.done = '1';
               };
               img.src = 'data:image/png;base64,' + arg;
               return true;
             })(), false)",
            json!(b64),
            PATIENCE,
        )
        .await
        .unwrap()
}
