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
/// The issue's promise: the page shows a trip within 3 s.
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
        unlock(&browser).await;
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

// ---------------------------------------------------------------------------
// The fleet page: three instances sharing one store, each serving its own admin
// router; the page of the first one shows and steers all three.

const FLEET_DOC: &str = r#"
[policies.freight]
breaker = { open_for = "10s" }

[policies.assistant]
degradation = { failures_to_degrade = 2 }
"#;

/// One instance of the fleet: its breaker, its coordination, its admin router.
struct FleetNode {
    handle: seawall::circuit_breaker::Handle,
    levels: seawall::degradation::Handle,
    _coordinated: std::sync::Arc<seawall::fleet::Coordinated>,
    addr: SocketAddr,
}

async fn fleet_node(store: &seawall::fleet::LocalStore) -> FleetNode {
    use seawall::fleet::{Fleet, FleetSecret};
    let policies = Policies::from_toml(FLEET_DOC).unwrap();
    let breaker = policies.circuit_breaker("freight", |b| b).unwrap();
    let handle = breaker.handle();
    let fleet = Fleet::builder(store.clone())
        .prefix("shop")
        .health_every(Duration::from_millis(100))
        .secret(Some(FleetSecret::new(vec![9; 32]).unwrap()))
        .build()
        .unwrap();
    let coordinated = std::sync::Arc::new(fleet.coordinate(&handle).unwrap());
    policies
        .register_coordination(std::sync::Arc::clone(&coordinated))
        .unwrap();
    let levels = policies
        .degradation::<String, String, _, _>("assistant", |b| {
            b.level(
                "canned",
                seawall::degradation::Fixed::new("canned".to_owned()),
            )
        })
        .unwrap()
        .handle();
    policies.follow_fleet_floor(&fleet, "assistant").unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().nest(
        "/admin",
        seawall::admin::router(policies, Some(AdminToken::new(TOKEN).unwrap())),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    FleetNode {
        handle,
        levels,
        _coordinated: coordinated,
        addr,
    }
}

/// A script counting the fleet page's audit rows with `event` (a prefix).
fn audit_rows(event: &str) -> String {
    format!(
        "[...document.querySelectorAll('[data-fleet-policy=\"freight\"] tr[data-event^=\"{event}\"]')].length"
    )
}

/// The text of the fleet page's counts for `freight`.
const FLEET_COUNTS: &str =
    "document.querySelector('[data-fleet-policy=\"freight\"] [data-field=\"fleet-counts\"]')?.textContent";

/// Types the token and unlocks the controls.
async fn unlock(browser: &Browser) {
    let input = browser.find("#token").await.unwrap();
    browser.type_into(&input, TOKEN).await.unwrap();
    browser
        .click(&browser.find("#unlock-button").await.unwrap())
        .await
        .unwrap();
}

/// Clicks the link to the dashboard's `view` (`policies` or `fleet`).
async fn show(browser: &Browser, view: &str) {
    let link = format!("#views a[data-view=\"{view}\"]");
    browser
        .click(&browser.find(&link).await.unwrap())
        .await
        .unwrap();
}

/// Clicks the fleet page's `action` button for `freight` and confirms; the question.
async fn fleet_click(browser: &Browser, action: &str) -> String {
    browser
        .click(
            &browser
                .find(&format!(
                    "[data-policy=\"freight\"][data-action=\"fleet/{action}\"]"
                ))
                .await
                .unwrap(),
        )
        .await
        .unwrap();
    confirm(browser).await
}

/// Sets the fleet page's reason and expiry inputs for `freight`.
async fn fleet_inputs(browser: &Browser, reason: &str, ttl: &str) {
    browser
        .execute(
            "const s = document.querySelector('[data-fleet-policy=\"freight\"]');
             s.querySelector('[data-field=\"fleet-reason\"]').value = arguments[0];
             s.querySelector('[data-field=\"fleet-ttl\"]').value = arguments[1];",
            json!([reason, ttl]),
        )
        .await
        .unwrap();
}

#[test]
fn the_fleet_page_shows_every_instance_and_steers_them_all_with_expiring_actions() {
    use seawall::circuit_breaker::{Forced, State};
    use seawall::fleet::{wall_ms, Keys, LocalStore, Store};

    let Some((chromium, chromedriver)) = browser_programs() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store = LocalStore::new();
        let nodes = [
            fleet_node(&store).await,
            fleet_node(&store).await,
            fleet_node(&store).await,
        ];
        // One instance held open by its own operator: a local action.
        nodes[1].handle.force(Forced::Open);
        let states = || nodes.iter().map(|n| n.handle.state()).collect::<Vec<_>>();

        let browser = Browser::start(&chromium, &chromedriver, 1280, 800)
            .await
            .unwrap();
        browser
            .goto(&format!("http://{}/admin#fleet", nodes[0].addr))
            .await
            .unwrap();

        // Every instance reports within 5 s: the counts, the held one first.
        browser
            .wait_for(
                "three instances on the fleet page",
                &format!("{FLEET_COUNTS} === arg"),
                json!("3 instance(s): 2 closed · 0 open · 0 half-open · 1 forced"),
                PATIENCE,
            )
            .await
            .unwrap();
        let page = browser
            .execute(
                "const s = document.querySelector('[data-fleet-policy=\"freight\"]');
                 const first = s.querySelector('details.instance');
                 return {
                   states: [...s.querySelectorAll('details.instance')].map(d => d.dataset.state),
                   held: first.querySelector('[data-field=\"instance-held\"]').textContent,
                   ages: [...s.querySelectorAll('[data-field=\"age\"]')].map(a => a.textContent),
                   rules: document.getElementById('fleet-rules').textContent,
                   policiesHidden: document.getElementById('groups').hidden,
                   controls: document.querySelectorAll('[data-action^=\"fleet/\"]').length,
                 };",
                json!([]),
            )
            .await
            .unwrap();
        assert_eq!(
            page["states"],
            json!(["forced_open", "closed", "closed"]),
            "{page}"
        );
        assert_eq!(
            page["held"], "held by a local operator (this instance only)",
            "{page}"
        );
        for age in page["ages"].as_array().unwrap() {
            let age = age.as_str().unwrap();
            assert!(age.starts_with("data ") && age.ends_with(" old"), "{page}");
        }
        assert!(
            page["rules"]
                .as_str()
                .unwrap()
                .contains("When both apply, the later wins on that instance"),
            "{page}"
        );
        assert_eq!(page["policiesHidden"], true, "{page}");
        // Read-only without the token: no fleet control at all.
        assert_eq!(page["controls"], 0, "{page}");

        unlock(&browser).await;
        browser
            .wait_for(
                "the fleet controls",
                "document.querySelector('[data-policy=\"freight\"][data-action=\"fleet/breaker/force-open\"]')",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();

        // A fleet-wide force open through the page holds all three.
        fleet_inputs(&browser, "game day", "1h").await;
        let question = fleet_click(&browser, "breaker/force-open").await;
        assert!(
            question.contains("open on every instance, until 1h from now"),
            "{question}"
        );
        let result = browser
            .wait_for(
                "the fleet action's result",
                "document.getElementById('result').dataset.ok === 'true' && document.getElementById('result').textContent",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        assert!(
            result.as_str().unwrap().contains("freight: force open fleet-wide: done (200). fleet action"),
            "{result}"
        );
        browser
            .wait_for(
                "all three held fleet-wide",
                &format!(
                    "{FLEET_COUNTS} === arg && {} === 3 && \
                     [...document.querySelectorAll('[data-fleet-policy=\"freight\"] [data-field=\"instance-held\"]')] \
                       .every(p => p.textContent.startsWith('held fleet-wide by action'))",
                    audit_rows("applied")
                ),
                json!("3 instance(s): 0 closed · 0 open · 0 half-open · 3 forced"),
                PATIENCE,
            )
            .await
            .unwrap();
        assert_eq!(states(), vec![State::ForcedOpen; 3]);
        let listed = browser
            .execute(
                "const s = document.querySelector('[data-fleet-policy=\"freight\"]');
                 const a = s.querySelector('[data-field=\"fleet-actions\"] li[data-kind=\"force_open\"]');
                 return { id: a.dataset.actionId, text: a.textContent,
                          issued: s.querySelectorAll('tr[data-event=\"issued\"]').length };",
                json!([]),
            )
            .await
            .unwrap();
        let id = listed["id"].as_str().unwrap().to_owned();
        assert_eq!(id.len(), 32, "{listed}");
        assert!(
            listed["text"]
                .as_str()
                .unwrap()
                .contains("force open “game day” by token:"),
            "{listed}"
        );
        assert_eq!(listed["issued"], 1, "{listed}");

        // This instance's own card (its live view) says a fleet action holds it.
        show(&browser, "policies").await;
        browser
            .wait_for(
                "this instance's card held fleet-wide",
                &format!(
                    "!document.getElementById('groups').hidden && {}?.startsWith(arg)",
                    field("freight", "fleet-note")
                ),
                json!(format!("held fleet-wide by action {}", &id[..8])),
                PATIENCE,
            )
            .await
            .unwrap();
        show(&browser, "fleet").await;
        browser
            .wait_for(
                "the fleet page again",
                "!document.getElementById('fleet').hidden && document.getElementById('groups').hidden",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();

        // Revert: each breaker returns to what it was before, the local force included.
        fleet_inputs(&browser, "supplier back", "1h").await;
        let question = fleet_click(&browser, &format!("revert/{id}")).await;
        assert!(question.contains("on every instance"), "{question}");
        browser
            .wait_for(
                "three instances reverted",
                &format!("{} === 3", audit_rows("reverted by")),
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        assert_eq!(
            states(),
            vec![State::Closed, State::ForcedOpen, State::Closed]
        );

        // A fleet-wide force closed that nobody reverts: every instance ends it at its expiry.
        fleet_inputs(&browser, "load test", "2s").await;
        fleet_click(&browser, "breaker/force-closed").await;
        browser
            .wait_for(
                "three instances applied and expired the force closed",
                "[...document.querySelectorAll('[data-fleet-policy=\"freight\"] tr[data-event=\"expired\"]')] \
                       .filter(r => document.querySelector(`li[data-kind=\"force_closed\"][data-action-id=\"${r.dataset.auditAction}\"]`)) \
                       .length === 3",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        assert_eq!(
            states(),
            vec![State::Closed, State::ForcedOpen, State::Closed]
        );

        // An instance whose breaker has been open 70 s while the others are
        // closed, as it reports itself: the worst first, flagged, with its evidence.
        let stuck = "f".repeat(32);
        let now = wall_ms();
        store
            .report(
                &Keys::new("shop", "freight").unwrap(),
                &stuck,
                format!("v2\t{stuck}\topen\t70000\t70000\t40\t40\t12\t\t{now}\tlocal_only\t70000\t2\t0\t"),
                now,
                now - 15_000,
            )
            .await
            .unwrap();
        browser
            .wait_for(
                "the stuck instance first",
                "document.querySelector('[data-fleet-policy=\"freight\"] details.instance')?.dataset.stuck === 'local_only'",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        browser
            .click(
                &browser
                    .find("[data-fleet-policy=\"freight\"] details.instance")
                    .await
                    .unwrap(),
            )
            .await
            .unwrap();
        let drill = browser
            .execute(
                "const d = document.querySelector('[data-fleet-policy=\"freight\"] details.instance');
                 return { open: d.open, age: d.querySelector('[data-field=\"age\"]').textContent, id: d.querySelector('[data-field=\"instance-id\"]').textContent,
                          evidence: d.querySelector('[data-field=\"stuck\"]').textContent,
                          flag: d.querySelector('[data-field=\"stuck-flag\"]').textContent,
                          counts: d.querySelector('[data-field=\"instance-counts\"]').textContent };",
                json!([]),
            )
            .await
            .unwrap();
        assert_eq!(drill["open"], true, "{drill}");
        assert_eq!(drill["id"], format!("instance {stuck}"), "{drill}");
        assert_eq!(drill["flag"], " · stuck open — local: this instance only", "{drill}");
        assert!(
            drill["evidence"].as_str().unwrap().starts_with(
                "stuck open — local: this instance only: open for 1 m 10 s while 2 other instance(s) are closed"
            ),
            "{drill}"
        );
        assert_eq!(
            drill["counts"],
            "40 calls, 40 failed, 12 short-circuited since it started; out of closed for 1 m 10 s",
            "{drill}"
        );
        // The drill-down stays open across the page's refreshes (its data ages).
        browser
            .wait_for(
                "a refresh keeping the card open",
                &format!(
                    "{FLEET_COUNTS}?.startsWith('4 instance(s): 2 closed · 1 open') && \
                     (d => d.open && d.dataset.stuck === 'local_only' \
                       && d.querySelector('[data-field=\"age\"]').textContent !== arg) \
                     (document.querySelector('[data-fleet-policy=\"freight\"] details.instance'))"
                ),
                drill["age"].clone(),
                PATIENCE,
            )
            .await
            .unwrap();

        // A fleet-wide degradation floor through the page: every instance's floor.
        browser
            .execute(
                "const s = document.querySelector('[data-fleet-policy=\"assistant\"]');
                 s.querySelector('[data-field=\"fleet-reason\"]').value = 'model overloaded';
                 s.querySelector('[data-field=\"fleet-ttl\"]').value = '10m';
                 s.querySelector('[data-field=\"fleet-floor-level\"]').value = 'canned';",
                json!([]),
            )
            .await
            .unwrap();
        browser
            .click(
                &browser
                    .find("[data-policy=\"assistant\"][data-action=\"fleet/degradation/floor\"]")
                    .await
                    .unwrap(),
            )
            .await
            .unwrap();
        let question = confirm(&browser).await;
        assert!(
            question.contains("floor of “assistant” at “canned” on every instance"),
            "{question}"
        );
        browser
            .wait_for(
                "the floor applied on three instances",
                "[...document.querySelectorAll('[data-fleet-policy=\"assistant\"] tr[data-event=\"applied\"]')].length === 3 \
                 && document.querySelector('[data-fleet-policy=\"assistant\"] li[data-in-force=\"true\"]')?.textContent",
                json!(null),
                PATIENCE,
            )
            .await
            .unwrap();
        assert_eq!(
            nodes
                .iter()
                .map(|n| n.levels.snapshot().state.floor)
                .collect::<Vec<_>>(),
            vec![Some(1); 3]
        );

        browser.quit().await;
    });
}
