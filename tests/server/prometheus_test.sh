#!/usr/bin/env bash
# creditloop-server's /metrics as Prometheus itself takes it: promtool's linter passes a scrape,
# and a real Prometheus server, scraping the admin port every second, stores the tenants' request
# counters with their labels and the counts that were sent.
#
#   tests/server/prometheus_test.sh SERVER
#
# SERVER is the creditloop-server binary; prometheus and promtool are taken from PATH, or from
# PROMETHEUS and PROMTOOL (Debian's package `prometheus` has both: tools/install-deps). Everything
# listens on loopback, on ports the kernel or this script picks, and is stopped on exit. Exits 0
# when every check passed, 1 naming the first that did not.
set -euo pipefail
server=${1:?usage: prometheus_test.sh SERVER}
prometheus=${PROMETHEUS:-prometheus}
promtool=${PROMTOOL:-promtool}
for tool in "$prometheus" "$promtool" curl jq; do
  command -v "$tool" >/dev/null || { echo "prometheus_test: $tool not found (tools/install-deps)"; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/creditloop-prometheus.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "prometheus_test: FAIL: $*"
  for log in "$work"/*.log; do
    [ -s "$log" ] && { echo "--- $log"; tail -n 20 "$log"; }
  done
  exit 1
}

cat >"$work/server.json" <<'EOF'
{
  "mode": "work",
  "listen": "127.0.0.1:0",
  "admin": {"listen": "127.0.0.1:0"},
  "io_threads": 1, "workers": 1, "slots": {"auto": {"min": 1, "max": 2}},
  "plans": {
    "pro":  {"P1": {"rate": 20, "burst": 40}, "P2": {"rate": 50, "burst": 100}},
    "lite": {"P2": {"rate": 50, "burst": 100}}
  },
  "tenants": [
    {"name": "alice", "key": "prometheus-test-alice", "plan": "pro"},
    {"name": "bob", "key": "prometheus-test-bob", "plan": "lite", "shares": 3}
  ],
  "shutdown_deadline_ms": 2000
}
EOF
"$server" -c "$work/server.json" >"$work/server.out" 2>"$work/server.log" &
pids+=($!)
deadline=$((SECONDS + 10))
until grep -q 'listening on' "$work/server.out"; do
  kill -0 "${pids[0]}" 2>/dev/null || fail "creditloop-server exited at start"
  ((SECONDS < deadline)) || fail "creditloop-server did not say where it listens within 10 s"
  sleep 0.05
done
line=$(cat "$work/server.out")
port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\),.*/\1/p' <<<"$line")
admin=$(sed -n 's/.*admin 127\.0\.0\.1:\([0-9]*\).*/\1/p' <<<"$line")
[ -n "$port" ] && [ -n "$admin" ] || fail "no ports in: $line"
echo "creditloop-server: tenants on $port, admin on $admin"

# 1. The exposition passes promtool's parser and linter (naming, HELP, TYPE, units), before any
# request (every series at zero) and after some.
curl -sf --max-time 5 "http://127.0.0.1:$admin/metrics" >"$work/metrics-0.txt" ||
  fail "GET /metrics on the admin port"
"$promtool" check metrics <"$work/metrics-0.txt" >"$work/promtool.log" 2>&1 ||
  fail "promtool check metrics, before any request: $(cat "$work/promtool.log")"
echo "ok: promtool check metrics (no request yet)"

send() {  # $1 key, $2 count
  local i
  for ((i = 0; i < $2; i++)); do
    curl -sf --max-time 10 -o /dev/null -H "Authorization: Bearer $1" \
      "http://127.0.0.1:$port/work?cpu_ms=0.1&wait_ms=2" || fail "a request with key ${1%%-*}..."
  done
}
send prometheus-test-alice 3
send prometheus-test-bob 2
curl -sf --max-time 5 "http://127.0.0.1:$admin/metrics" >"$work/metrics-1.txt" ||
  fail "GET /metrics after requests"
"$promtool" check metrics <"$work/metrics-1.txt" >"$work/promtool.log" 2>&1 ||
  fail "promtool check metrics, after requests: $(cat "$work/promtool.log")"
echo "ok: promtool check metrics (after 5 requests)"
# The learned room, named as the nginx module names it.
grep -Eq '^creditloop_loop_room_slots [12]$' "$work/metrics-1.txt" ||
  fail "no creditloop_loop_room_slots of 1 or 2 (the learned room's bounds)"
grep -Eq '^creditloop_loop_room_latency_seconds [0-9.e+-]+$' "$work/metrics-1.txt" ||
  fail "no creditloop_loop_room_latency_seconds"
echo "ok: the learned room's slots and latency"

# 2. A real Prometheus scrapes the admin port. Its listener needs a port number up front: one that
# nothing answers on now, tried again with another if Prometheus still cannot bind it.
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: creditloop
    static_configs:
      - targets: ['127.0.0.1:$admin']
EOF
"$promtool" check config "$work/prometheus.yml" >"$work/promtool.log" 2>&1 ||
  fail "promtool check config: $(cat "$work/promtool.log")"

free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}
prom_port=""
for attempt in 1 2 3; do
  p=$(free_port)
  "$prometheus" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
    --web.listen-address="127.0.0.1:$p" --log.level=warn >"$work/prometheus.log" 2>&1 &
  prom_pid=$!
  pids+=("$prom_pid")
  deadline=$((SECONDS + 20))
  while kill -0 "$prom_pid" 2>/dev/null && ((SECONDS < deadline)); do
    if curl -sf --max-time 2 -o /dev/null "http://127.0.0.1:$p/-/ready"; then
      prom_port=$p
      break 2
    fi
    sleep 0.2
  done
  kill "$prom_pid" 2>/dev/null || true
  wait "$prom_pid" 2>/dev/null || true
done
[ -n "$prom_port" ] || fail "prometheus did not become ready (three ports tried)"
echo "prometheus: ready on $prom_port, scraping 127.0.0.1:$admin every second"

query() {  # $1 PromQL: the API's JSON answer
  curl -sf --max-time 5 -G "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1"
}

# 3. The tenants' series arrive, with their labels and the counts sent. Bounded: a scrape a
# second, so 30 s is many chances.
deadline=$((SECONDS + 30))
want='alice 3
bob 2'
got=""
while ((SECONDS < deadline)); do
  answer=$(query 'sum by (tenant) (creditloop_tenant_requests_total{job="creditloop"})' || true)
  [ -n "$answer" ] || answer='{}'
  got=$(jq -r '.data.result[]? | "\(.metric.tenant) \(.value[1])"' <<<"$answer" | sort)
  [ "$got" = "$want" ] && break
  sleep 0.5
done
[ "$got" = "$want" ] || fail "requests by tenant in Prometheus: got '${got//$'\n'/, }', want '${want//$'\n'/, }'"
echo "ok: creditloop_tenant_requests_total by tenant: ${got//$'\n'/, }"

answer=$(query 'creditloop_tenant_requests_total') || fail "query creditloop_tenant_requests_total"
labels=$(jq -r '.data.result[] | .metric | "\(.tenant) \(.class) \(.job) \(.instance)"' \
  <<<"$answer" | sort)
want_labels=$(for t in alice bob; do for c in P1 P2 P3; do
  echo "$t $c creditloop 127.0.0.1:$admin"; done; done)
[ "$labels" = "$want_labels" ] ||
  fail "series of creditloop_tenant_requests_total: got '${labels//$'\n'/, }'"
echo "ok: one series per tenant and class (P1..P3), job and instance labels"

answer=$(query 'up{job="creditloop"}') || fail "query up"
[ "$(jq -r '.data.result[0].value[1]' <<<"$answer")" = 1 ] || fail "up{job=\"creditloop\"} is not 1"
answer=$(query 'sum by (tenant) (creditloop_tenant_queue_wait_seconds_count)') ||
  fail "query the wait histogram"
got=$(jq -r '.data.result[] | "\(.metric.tenant) \(.value[1])"' <<<"$answer" | sort)
[ "$got" = "$want" ] || fail "queue wait histogram counts: got '${got//$'\n'/, }'"
echo "ok: up is 1; the queue wait histogram counted every request"
echo "prometheus_test: 6 passed, 0 failed"
