#!/usr/bin/env bash
# creditloop-top against a real creditloop-server: the plain frame of --once, then the live view
# driven through tmux (keys in with send-keys, the screen read back with capture-pane).
#
# usage: tests/top/top_test.sh CREDITLOOP-SERVER CREDITLOOP-TOP
#
# Every wait polls for its condition under a deadline; nothing sleeps a fixed time to let
# something happen. The server listens on ports the kernel picks, read from the line it prints.
set -euo pipefail

server=${1:?usage: tests/top/top_test.sh CREDITLOOP-SERVER CREDITLOOP-TOP}
top=${2:?usage: tests/top/top_test.sh CREDITLOOP-SERVER CREDITLOOP-TOP}
for tool in tmux curl; do
  command -v "$tool" >/dev/null || { echo "top_test: $tool is needed (tools/install-deps)"; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/creditloop-top-test.XXXXXX")
sock=$tmp/tmux.sock  # a tmux server of our own: nobody else's sessions are touched
server_pid=
load_pid=
cleanup() {
  local status=$?
  rm -f "$tmp/load.on"
  [[ -n $load_pid ]] && wait "$load_pid" 2>/dev/null || true
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null || true
  tmux -S "$sock" kill-server 2>/dev/null || true
  [[ -n $server_pid ]] && wait "$server_pid" 2>/dev/null || true
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tmux_() { tmux -S "$sock" -f /dev/null "$@"; }
pane() { tmux_ capture-pane -p -t top 2>/dev/null; }

fail() {
  echo "FAIL: $*"
  if tmux_ has-session -t top 2>/dev/null; then
    echo "--- screen:"
    pane
  fi
  echo "--- server stderr:"
  cat "$tmp/server.err" 2>/dev/null || true
  exit 1
}

pass() { echo "ok: $*"; }

# wait_for DESCRIPTION COMMAND...: runs COMMAND until it succeeds, for at most wait_s seconds
# (generous: the machine running the test may be busy).
wait_s=15
wait_for() {
  local what=$1
  shift
  local deadline=$((SECONDS + wait_s))
  until "$@"; do
    ((SECONDS < deadline)) || fail "$what (not within $wait_s s)"
    sleep 0.1
  done
}

pane_has() { pane | grep -Eq -- "$1"; }
pane_lacks() { ! pane | grep -Eq -- "$1"; }
# The tenants' rows in the order the screen shows them, e.g. "alice bob ".
rows() { pane | awk '$1 == "alice" || $1 == "bob" { printf "%s ", $1 }'; }
shows() {  # shows HEADER-REGEX ORDER: the view line matches and the rows come in that order
  pane_has "$1" && [[ "$(rows)" == "$2" ]]
}

# --- the server ---------------------------------------------------------------------------------
cat >"$tmp/server.json" <<'EOF'
{
  "mode": "work",
  "listen": "127.0.0.1:0",
  "admin": {"listen": "127.0.0.1:0", "key": "admin-test-key"},
  "io_threads": 2,
  "workers": 2,
  "slots": 4,
  "cost_unit_ms": 1,
  "classes": 2,
  "plans": {
    "pro":  {"P1": {"rate": 20, "burst": 40}, "P2": {"rate": 50, "burst": 100}},
    "lite": {"P2": {"rate": 50, "burst": 100}}
  },
  "tenants": [
    {"name": "alice", "key": "alice-secret-key", "plan": "pro",  "shares": 4},
    {"name": "bob",   "key": "bob-secret-key-1", "plan": "lite", "shares": 1}
  ],
  "work": {"max_cpu_ms": 100, "max_wait_ms": 1000},
  "shutdown_deadline_ms": 2000
}
EOF
"$server" -c "$tmp/server.json" >"$tmp/server.out" 2>"$tmp/server.err" &
server_pid=$!
server_up() {
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited at start"
  grep -q 'listening on' "$tmp/server.out"
}
wait_for "the server prints its ports" server_up
line=$(head -n1 "$tmp/server.out")
[[ $line =~ listening\ on\ ([0-9.]+:[0-9]+),\ admin\ ([0-9.]+:[0-9]+) ]] ||
  fail "cannot read the ports from: $line"
main=${BASH_REMATCH[1]}
admin=${BASH_REMATCH[2]}
pass "server up: main $main, admin $admin"

request() {  # request KEY: one unit of work; prints the HTTP status
  curl -sS --max-time 10 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $1" \
    "http://$main/work?cpu_ms=2&wait_ms=5"
}
for key in alice-secret-key bob-secret-key-1; do
  for _ in 1 2 3 4 5; do
    code=$(request "$key")
    [[ $code == 200 ]] || fail "a request with key ${key%%-*}'s answered $code"
  done
done
pass "five requests answered for each of alice and bob"

# --- --once: a plain frame, with rates from two polls ---------------------------------------------
# alice keeps asking while --once measures, so her rate is above zero and bob's is zero. The loop
# ends after its current request when the file goes, so no request is left behind.
touch "$tmp/load.on"
(while [[ -e $tmp/load.on ]]; do request alice-secret-key >/dev/null 2>&1 || true; done) &
load_pid=$!
"$top" --once --interval 0.5 --admin-key admin-test-key "http://$admin" >"$tmp/once.txt" ||
  fail "--once exited with $?"
rm "$tmp/load.on"
wait "$load_pid"
load_pid=
cat "$tmp/once.txt"
grep -Eq '^creditloop-top .* ok$' "$tmp/once.txt" || fail "--once: no status line"
grep -Eq '^scheduler creditloop +tenants 2 ' "$tmp/once.txt" || fail "--once: no summary line"
grep -Eq '^scheduler creditloop .* room 4 ' "$tmp/once.txt" || fail "--once: no room in the summary"
grep -Eq '^NAME +PLAN +SHR +QUEUE +%P1 +%P2 +%P3 +TPUT/s' "$tmp/once.txt" ||
  fail "--once: no column headings"
# Columns: NAME PLAN SHR QUEUE %P1 %P2 %P3 TPUT/s ...
alice_tput=$(awk '$1 == "alice" && $2 == "pro" && $3 == 4 { print $8 }' "$tmp/once.txt")
bob_tput=$(awk '$1 == "bob" && $2 == "lite" && $3 == 1 { print $8 }' "$tmp/once.txt")
[[ -n $alice_tput && -n $bob_tput ]] || fail "--once: alice (pro, 4) or bob (lite, 1) missing"
awk -v a="$alice_tput" -v b="$bob_tput" 'BEGIN { exit !(a > 0 && b == 0) }' ||
  fail "--once: throughput alice $alice_tput, bob $bob_tput; expected alice > 0, bob 0"
alice_mix=$(awk '$1 == "alice" { gsub("%", ""); print $5 + $6 + $7 }' "$tmp/once.txt")
((alice_mix >= 99 && alice_mix <= 101)) || fail "--once: alice's class mix adds up to $alice_mix%"
pass "--once: both tenants with their plans; alice's rate $alice_tput/s, mix sums to 100 %"

export CREDITLOOP_ADMIN_KEY=admin-test-key  # the other way to give the key, from here on
"$top" --once --interval 0.2 --sort name --reverse "http://$admin" >"$tmp/once.txt"
[[ $(awk '$1 == "alice" || $1 == "bob" { printf "%s ", $1 }' "$tmp/once.txt") == "bob alice " ]] ||
  fail "--once --sort name --reverse: $(cat "$tmp/once.txt")"
"$top" --once --interval 0.2 --filter BO "http://$admin" >"$tmp/once.txt"
grep -q '^bob ' "$tmp/once.txt" && ! grep -q '^alice ' "$tmp/once.txt" ||
  fail "--once --filter BO: $(cat "$tmp/once.txt")"
pass "--once: --sort name --reverse puts bob first; --filter BO shows bob alone"
if CREDITLOOP_ADMIN_KEY= "$top" --once --interval 0.1 "http://$admin" >/dev/null 2>"$tmp/once.err"; then
  fail "--once without the admin key succeeded"
fi
grep -q 'HTTP 401' "$tmp/once.err" || fail "--once without the admin key: $(cat "$tmp/once.err")"
pass "--once without the admin key: exit 1, $(cat "$tmp/once.err")"

# --- the live view --------------------------------------------------------------------------------
# The command records top's exit status, so that `q` is seen to end it cleanly.
tmux_ new-session -d -s top -x 160 -y 40 -e CREDITLOOP_ADMIN_KEY=admin-test-key \
  "'$top' --sort name --interval 0.3 'http://$admin'; echo \$? > '$tmp/top.status'"
wait_for "the tenants appear with their plans" \
  eval "pane_has '^alice +pro +4 ' && pane_has '^bob +lite +1 ' && pane_has ' ok$'"
pass "live: alice (pro) and bob (lite) shown, server ok"

wait_for "sorted by name: alice first" shows '^sort NAME asc' "alice bob "
tmux_ send-keys -t top s
wait_for "s sorts by plan: bob (lite) first" shows '^sort PLAN asc' "bob alice "
tmux_ send-keys -t top r
wait_for "r reverses: alice (pro) first" shows '^sort PLAN desc' "alice bob "
tmux_ send-keys -t top S
wait_for "S goes back to NAME, still reversed: bob first" shows '^sort NAME desc' "bob alice "
pass "live: s, r and S each change the order"

tmux_ send-keys -t top / b o
wait_for "the filter prompt" pane_has '^filter: bo'
tmux_ send-keys -t top Enter
wait_for "filter bo: only bob" \
  eval "pane_has 'filter \"bo\": 1 of 2 tenants' && [[ \"\$(rows)\" == 'bob ' ]]"
tmux_ send-keys -t top Escape
wait_for "Esc clears the filter" eval "pane_lacks 'filter \"' && [[ \"\$(rows)\" == 'bob alice ' ]]"
pass "live: / bo Enter hides alice; Esc brings her back"

tmux_ send-keys -t top h
wait_for "h shows the help" eval "pane_has '^keys$' && [[ -z \"\$(rows)\" ]]"
tmux_ send-keys -t top x
wait_for "any key closes the help" shows '^sort NAME desc' "bob alice "
pass "live: h opens the help, a key closes it"

tmux_ resize-window -t top -x 60 -y 10
wait_for "redrawn to 60 columns" \
  eval "pane_has '^NAME +PLAN +SHR' && pane_lacks OLDEST && [[ \"\$(rows)\" == 'bob alice ' ]]"
tmux_ resize-window -t top -x 160 -y 40
wait_for "redrawn to 160 columns" pane_has 'OLDEST'
pass "live: redrawn after the terminal shrank and grew"

kill -TERM "$server_pid"
wait "$server_pid" || fail "the server exited with $? on SIGTERM"
server_pid=
wait_for "the header says the server is unreachable" pane_has 'UNREACHABLE: connect: Connection refused'
tmux_ capture-pane -p -e -t top | grep -Eq $'\e\\[[0-9;]*31m(\e\\[[0-9;]*m)*UNREACHABLE' ||
  fail "UNREACHABLE is not drawn in red"
# Still polling, and still showing what it last saw.
wait_for "the failure count grows" pane_has '\(([2-9]|[0-9]{2,}) polls failed'
pane_has '^bob +lite' || fail "the last data is no longer shown"
pass "live: the stopped server is shown UNREACHABLE (in red), polling goes on"

tmux_ send-keys -t top q
session_gone() { ! tmux_ has-session -t top 2>/dev/null; }
wait_for "q closes the pane" session_gone
[[ -f $tmp/top.status ]] || fail "creditloop-top did not exit"
[[ $(cat "$tmp/top.status") == 0 ]] || fail "creditloop-top exited with $(cat "$tmp/top.status")"
pass "live: q exits with status 0 and the pane closes"

if "$top" --once --interval 0.1 --timeout 1 "http://$admin" >"$tmp/once.txt" 2>"$tmp/once.err"; then
  fail "--once succeeded against a stopped server"
fi
grep -q 'Connection refused' "$tmp/once.err" || fail "--once: $(cat "$tmp/once.err")"
pass "--once against a stopped server: exit 1, $(cat "$tmp/once.err")"
echo "top_test: all passed"
