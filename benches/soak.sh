#!/usr/bin/env bash
# Soak: runs the axum_routes example (release build) on loopback, drives it for a
# minute without ever scraping /metrics, and prints its resident memory every 5 s.
#
#   benches/soak.sh              # 60 s, 16 requests in flight
#   benches/soak.sh 120 32       # 120 s, 32 in flight
#
# With the recorder's upkeep running (the example runs it every 5 s), memory climbs
# during warm-up and then stays flat; without it, every histogram sample would stay in
# memory until the next scrape. Each request goes through the whole stack of its
# route (fallback, deadline, bulkhead, breaker or degradation) and the loopback
# dependency. The load is curl's own parallel mode; the script stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

duration="${1:-60}"
parallel="${2:-16}"
port="${SOAK_PORT:-39517}"
base="http://127.0.0.1:${port}"

command -v curl >/dev/null || { echo "soak: needs curl" >&2; exit 1; }
cargo build --release --example axum_routes --quiet

RUST_LOG=warn ./target/release/examples/axum_routes --serve --addr "127.0.0.1:${port}" >/dev/null 2>&1 &
server=$!
load=""
cleanup() {
    [ -n "$load" ] && kill "$load" 2>/dev/null || true
    kill "$server" 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT

for _ in $(seq 1 100); do
    curl -sf -o /dev/null "${base}/products" && break
    sleep 0.1
done
curl -sf -o /dev/null "${base}/products" || { echo "soak: the example did not start" >&2; exit 1; }

rss_mb() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/${server}/status"; }
# Calls the freight route's bulkhead admitted, from the admin snapshot (not /metrics).
admitted() {
    curl -s "${base}/admin/policies/freight" | grep -o '"admitted": *[0-9]*' | head -1 | tr -dc '0-9'
}

echo "soak: ${duration} s, ${parallel} requests in flight, /metrics never scraped"
printf '%6s %10s %18s\n' "t (s)" "RSS (MB)" "freight admitted"
printf '%6d %10s %18s\n' 0 "$(rss_mb)" "$(admitted)"

# Many more URLs than the run can use; `timeout` ends the load.
timeout "$duration" curl -s --parallel --parallel-max "$parallel" \
    "${base}/{quote/lisbon,recommendations,assistant,quote/atlantis}?n=[1-50000000]" >/dev/null 2>&1 &
load=$!

elapsed=0
while [ "$elapsed" -lt "$duration" ]; do
    sleep 5
    elapsed=$((elapsed + 5))
    printf '%6d %10s %18s\n' "$elapsed" "$(rss_mb)" "$(admitted)"
done
