#!/usr/bin/env bash
# cosmos3 serve against the second hardening audit's requests (N1-N3, N6,
# N7, N11), on the built-in demo model (CPU), the server under an
# address-space cap: decompression bombs as references, a huge multipart
# text field, value edges, 32 concurrent clients from one address, and a
# trusted proxy's X-Forwarded-For (tests/serve_harden.js, node built-ins).
set -u
bin=${COSMOS3_BIN:?}
src=${COSMOS3_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
command -v node >/dev/null || { echo "SKIP: node not found"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
command -v ffmpeg >/dev/null || { echo "SKIP: ffmpeg not found"; exit 77; }
if "$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd"; then
    echo "SKIP: built without libmicrohttpd"; exit 77
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
mkdir "$tmp/tmpdir"
export TMPDIR="$tmp/tmpdir"
unset COSMOS3_MODEL COSMOS3_API_KEY

python3 "$src/tests/bombs.py" || { bad "python3 could not write the bombs"; finish serve_harden; exit 1; }
# 400 black 1024x1024 frames (1.2 GB decoded; a 9-frame video uses 9)
ffmpeg -loglevel error -y -f lavfi -i color=black:s=1024x1024:r=24 -frames:v 400 -c:v libx264 \
    -preset ultrafast -pix_fmt yuv420p long.mp4 || { bad "ffmpeg could not write long.mp4"; finish serve_harden; exit 1; }

# the address-space cap; a sanitizer build reserves terabytes of shadow
# space, so there ASan's own RSS limit stands in for it
vcap=4194304 SLOW=1
if ldd "$bin" 2>/dev/null | grep -q libasan; then
    vcap=unlimited SLOW=4
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}hard_rss_limit_mb=3000"
fi
# start NAME ARGS...: a capped server on the demo model, ready
start() {
    local name=$1; shift
    ulimit -S -v $vcap
    serve_start "$name" -W 64 -H 64 --steps 2 "$@"
    local rc=$?
    ulimit -S -v unlimited
    [ $rc = 0 ] || return 1
    for _ in $(seq 300); do grep -q '^cosmos3 serve: ready' "$name.err" && return 0; sleep 0.1; done
    bad "$name never became ready: $(cat "$name.err")"; return 1
}
stop() { # the server drains and exits 0, its temp folder empty
    kill -TERM "$spid"
    for _ in $(seq 200); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
    wait "$spid"; local st=$?
    [ "$st" = 0 ] && ok || bad "$1: SIGTERM: exit $st: $(tail -3 "$1.err")"
}

start a && {
    SLOW=$SLOW PORT=$port PID=$spid node "$src/tests/serve_harden.js" bombs multipart edges load && ok || bad "serve_harden.js"
    kill -0 "$spid" 2>/dev/null && ok || bad "the server died: $(tail -3 a.err)"
    stop a
}
start b --trusted-proxy 127.0.0.1 --max-per-client 1 && {
    PORT=$port PID=$spid node "$src/tests/serve_harden.js" proxy && ok || bad "serve_harden.js proxy"
    stop b
}
timeout 20 "$bin" serve --port 0 --trusted-proxy proxy.example > r.out 2> r.err
rc=$?
[ $rc = 2 ] && grep -q "is not an IP address" r.err && ok || bad "--trusted-proxy proxy.example: exit $rc: $(cat r.err)"
left=$(ls -A "$tmp/tmpdir")
[ -z "$left" ] && ok || bad "temporary files left behind: $left"

finish serve_harden
