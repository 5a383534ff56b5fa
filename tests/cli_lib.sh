# cli_lib.sh - sourced by the shell tests after their skip checks: $bin, a
# scratch folder $tmp that becomes the working directory and is removed on
# exit (after the test's own cleanup(), where it defines one: servers,
# tmux sockets), the pass/fail counters, expect(), finish(), serve_start()
# and same_pixels(). XDG_STATE_HOME is a folder of $tmp: a server's job store
# (and the REPL's history) is the test's own.
bin=${COSMOS3_BIN:?}
tmp=$(mktemp -d)
trap '[ "$(type -t cleanup)" = function ] && cleanup; rm -rf "$tmp"' EXIT
cd "$tmp"
export XDG_STATE_HOME="$tmp/state"
pass=0; fail=0
ok()   { pass=$((pass + 1)); }
bad()  { fail=$((fail + 1)); echo "FAIL: $*"; }
# finish NAME: the counts; the status is the test's (0: nothing failed)
finish() { echo "$1: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; }

# expect CODE SUBSTRING -- ARGS...: exit status, a one-line error containing SUBSTRING
expect() {
    local code=$1 sub=$2; shift 3
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    if [ "$rc" != "$code" ]; then bad "cosmos3 $* -> exit $rc, want $code: $(cat "$tmp/err")"; return; fi
    if [ -n "$sub" ] && ! grep -qF -- "$sub" "$tmp/err"; then bad "cosmos3 $* -> '$(cat "$tmp/err")' lacks '$sub'"; return; fi
    if [ "$code" != 0 ] && [ "$(wc -l < "$tmp/err")" != 1 ]; then bad "cosmos3 $*: error is not one line: $(cat "$tmp/err")"; return; fi
    ok
}

# serve_start NAME ARGS...: `cosmos3 serve --port 0 ARGS` in the background,
# output in NAME.out / NAME.err; sets $spid (also added to pids, which the
# test's cleanup kills) and $port once it listens (10 s), else bad and 1
serve_start() {
    local name=$1; shift
    "$bin" serve --port 0 "$@" > "$name.out" 2> "$name.err" &
    spid=$!
    pids+=("$spid")
    serve_port "$name.err" 100
    [ -n "$port" ] || { bad "$name did not start: $(cat "$name.err")"; return 1; }
}

# serve_port ERRFILE TENTHS [READY]: $port once ERRFILE says the server
# listens (and, with READY, once it also says 'serve: ready'), polled every
# 0.1 s at most TENTHS times; empty if not by then
serve_port() {
    port=
    for _ in $(seq "$2"); do
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$1" | head -1)
        [ -n "$port" ] && { [ -z "${3:-}" ] || grep -q 'serve: ready' "$1"; } && return 0
        sleep 0.1
    done
    [ -n "$port" ] && [ -z "${3:-}" ]
}

# latents_rel A.st B.st: prints |B - A| / |A| (relative L2) of the tensor
# 'latents' of two safetensors files (python3)
latents_rel() {
    python3 - "$1" "$2" <<'PY'
import array, json, math, struct, sys
def lat(p):
    d = open(p, 'rb').read(); n = struct.unpack('<Q', d[:8])[0]
    t = json.loads(d[8:8 + n])['latents']; o = t['data_offsets']
    a = array.array('f'); a.frombytes(d[8 + n + o[0]:8 + n + o[1]]); return a
a, b = lat(sys.argv[1]), lat(sys.argv[2])
assert len(a) == len(b), 'the latents differ in size'
print('%.6e' % math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(x * x for x in a)))
PY
}
# le X Y: the number X is at most Y (awk; both may be in e notation)
le() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x + 0 <= y + 0) }'; }

# same_pixels A.png B.png: the decompressed image data are equal (python3)
same_pixels() {
    python3 - "$1" "$2" <<'PY'
import struct, sys, zlib
def idat(p):
    d = open(p, 'rb').read(); i = 8; out = b''
    while i < len(d):
        n = struct.unpack('>I', d[i:i + 4])[0]; t = d[i + 4:i + 8]
        if t == b'IDAT': out += d[i + 8:i + 8 + n]
        i += 12 + n
    return zlib.decompress(out)
sys.exit(0 if idat(sys.argv[1]) == idat(sys.argv[2]) else 1)
PY
}
