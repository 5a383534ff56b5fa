#!/usr/bin/env bash
# cosmos3 serve on the tiny fixture model (CPU), through the official OpenAI
# JavaScript client and raw HTTP (tests/serve/serve_test.js):
#   server 1: /health 503 while loading then 200; the client's images.generate
#             with the seed's fields (pixels equal to cosmos3 gen's); every
#             error path; SSE events counted; 50 requests from 5 clients
#   server 2 (--queue 1): 429 with Retry-After, clients that disconnect while
#             queued / streaming / waiting cancel their work; SIGTERM finishes
#             the request in flight, answers the waiting one 503, exits 0
#   server 3: SIGTERM twice cancels the request in flight
# Each server listens on a free port (--port 0) of 127.0.0.1.
set -u
bin=${COSMOS3_BIN:?}
src=${COSMOS3_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
. "${COSMOS3_SRCDIR:?}/tests/fixtures.sh"
model="$fx/tiny-a/model"
[ -f "$model/model_index.json" ] || { echo "SKIP: fixtures not found (set COSMOS3_FIXTURES or -Dfixtures to the folder with tiny-a/)"; exit 77; }
js="$src/tests/serve"
[ -d "$js/node_modules/openai" ] || { echo "SKIP: the openai npm package is missing (.ci/setup, or: cd tests/serve && npm ci)"; exit 77; }
command -v node >/dev/null || { echo "SKIP: node not installed (.ci/setup, or: apt-get install nodejs npm)"; exit 77; }
if "$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd"; then
    echo "SKIP: built without libmicrohttpd"; exit 77
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
# the server writes no file for an answer: TMPDIR is a plain (empty) file,
# so any temporary file or folder made under it would fail
: > "$tmp/tmpdir"
export TMPDIR="$tmp/tmpdir"

# start NAME ARGS...: a server of the fixture model (serve_start)
start() { serve_start "$1" -m "$model" "${@:2}"; }
health() { node -e "require('$js/lib.js').request('http://127.0.0.1:$1', {path: '/health'}).then(r => console.log(r.status, r.body), e => console.log('error', e.code))"; }
wait_ready() {
    for _ in $(seq 200); do [ "$(health "$1" | cut -d' ' -f1)" = 200 ] && return 0; sleep 0.1; done
    return 1
}
# wait_metric 'JS PREDICATE ON m': poll /metrics (20 s) until it holds
wait_metric() {
    BASE="http://127.0.0.1:$port" node -e "
      const {waitMetrics} = require('$js/lib.js');
      waitMetrics(process.env.BASE, m => $1, 20).then(ok => process.exit(ok ? 0 : 1));"
}
run_js() { # MODE [ARG]: run a mode of serve_test.js, count its result
    BASE="http://127.0.0.1:$port" REF_PNG="$tmp/ref.png" node "$js/serve_test.js" "$@" > "js-$1.log" 2>&1
    local rc=$?
    cat "js-$1.log"
    [ $rc = 0 ] && ok || bad "serve_test.js $1 (exit $rc)"
}
# wait_exit PID SECONDS: sets $st to the exit status, or "running"
wait_exit() {
    st=running
    for _ in $(seq $(($2 * 10))); do
        if ! kill -0 "$1" 2>/dev/null; then wait "$1"; st=$?; return; fi
        sleep 0.1
    done
}

# the reference image, made by cosmos3 gen with the client test's settings
"$bin" gen -m "$model" -p "a red cube on a wooden table" -n blurry -g 7.5 -W 32 -H 32 --steps 2 -S 7 \
    --shift 3 --schedule linear -q -o ref.png || bad "cosmos3 gen for the reference image"

# ------------------------------------------------------------- server 1
COSMOS3_TEST_SERVE_LOAD_DELAY=1.5 start s1 -W 64 -H 64 --tensor-parallel-size 1 --cfg-parallel-size 1 \
    --ulysses-degree 1 || exit 1
h=$(health "$port")
case "$h" in "503 "*loading*) ok ;; *) bad "/health while loading: '$h', want 503 loading" ;; esac
wait_ready "$port" && ok || bad "server 1 never became ready: $(cat s1.err)"
for _ in $(seq 20); do grep -q '^cosmos3 serve: ready: ' s1.err && break; sleep 0.1; done
grep -q '^cosmos3 serve: ready: tiny-a/model on cpu (tp 1 x cfg-parallel 1 x ulysses 1)' s1.err && ok ||
    bad "ready line: $(cat s1.err)"
run_js client
run_js errors
run_js sse
run_js load
kill -TERM "$spid"
wait_exit "$spid" 20; [ "$st" = 0 ] && ok || bad "server 1: SIGTERM when idle should exit 0: $(tail -3 s1.err)"
grep -q 'cosmos3 serve: stopped' s1.err && ok || bad "server 1: no 'stopped' line"

# ------------------------------------------------------------- server 2
start s2 --queue 1 -W 256 -H 256 --max-cost 1000 || exit 1  # its long jobs cost 625
wait_ready "$port" && ok || bad "server 2 never became ready: $(cat s2.err)"
run_js queue
# SIGTERM with one request running and one waiting
BASE="http://127.0.0.1:$port" node "$js/serve_test.js" inflight \
    '{"prompt":"finish me","size":"256x256","num_inference_steps":1000,"seed":2}' > first.txt 2>&1 &
first=$!
wait_metric "m.cosmos3_busy === 1" &&
    ok || bad "server 2: the first request never ran"
BASE="http://127.0.0.1:$port" node "$js/serve_test.js" inflight \
    '{"prompt":"wait","size":"32x32","num_inference_steps":2}' > second.txt 2>&1 &
second=$!
wait_metric "m.cosmos3_queue_length === 1" &&
    ok || bad "server 2: the second request never queued"
kill -TERM "$spid"
wait_exit "$spid" 60; [ "$st" = 0 ] && ok || bad "server 2: SIGTERM should finish and exit 0: $(tail -3 s2.err)"
wait "$first"; wait "$second"
grep -q '^200 png$' first.txt && ok || bad "the request in flight at SIGTERM should finish: $(cat first.txt)"
grep -q '^503 cancelled: the server is shutting down' second.txt && ok ||
    bad "the waiting request at SIGTERM should get 503: $(cat second.txt)"
h=$(health "$port")
case "$h" in error*) ok ;; *) bad "server 2 still answers after exit: $h" ;; esac

# ------------------------------------------------------------- server 3
start s3 -W 64 -H 64 || exit 1
wait_ready "$port" && ok || bad "server 3 never became ready"
BASE="http://127.0.0.1:$port" node "$js/serve_test.js" inflight \
    '{"prompt":"cancel me","size":"64x64","num_inference_steps":1000,"n":10}' > third.txt 2>&1 &
third=$!
wait_metric "m.cosmos3_busy === 1" &&
    ok || bad "server 3: the request never ran"
kill -TERM "$spid"; sleep 0.3; kill -TERM "$spid"
wait_exit "$spid" 10; [ "$st" = 0 ] && ok || bad "server 3: a second SIGTERM should cancel and exit 0: $(tail -3 s3.err)"
wait "$third"
grep -q '^503 cancelled' third.txt && ok || bad "the cancelled request should get 503: $(cat third.txt)"
grep -q 'cancelling the request in flight' s3.err && ok || bad "server 3: no cancel line: $(cat s3.err)"

# a port in use is a clear error (its own job store: one server per store)
start s4 -W 64 -H 64 || exit 1
"$bin" serve -m "$model" --port "$port" --store "$tmp/s5.store" > /dev/null 2> s5.err
rc=$?
[ $rc != 0 ] && grep -q "cannot listen on 127.0.0.1 port $port" s5.err && ok || bad "port in use: rc $rc $(cat s5.err)"
kill -TERM "$spid"; wait_exit "$spid" 10
"$bin" serve -m "$model" --port 0 --frames 5 2> s6.err
[ $? = 2 ] && grep -q -e 'unknown option --frames' -e 'drop --frames' s6.err && ok || bad "serve --frames: $(cat s6.err)"
"$bin" serve -m "$model" --host no.such.host.invalid 2> s7.err
[ $? = 2 ] && grep -q -- '--host no.such.host.invalid' s7.err && ok || bad "bad --host: $(cat s7.err)"

# the layout is checked before loading, as for gen
"$bin" serve -m "$model" --port 0 --tp 3 2> s9.err
[ $? = 2 ] && grep -q -- '--tp 3 does not divide' s9.err && ok || bad "serve --tp 3: $(cat s9.err)"
[ -f "$tmp/tmpdir" ] && [ ! -s "$tmp/tmpdir" ] && ok || bad "TMPDIR was touched"
"$bin" serve -m "$model" -o x.png 2> s8.err
[ $? = 2 ] && grep -q -e 'unknown option -o' -e 'drop --output' s8.err && ok || bad "serve -o: $(cat s8.err)"

finish serve
