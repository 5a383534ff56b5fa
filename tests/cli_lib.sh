# cli_lib.sh - sourced by test_cli.sh and test_cli_fixtures.sh: a scratch
# folder, the pass/fail counters and expect().
bin=${COSMOS3_BIN:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
pass=0; fail=0
ok()   { pass=$((pass + 1)); }
bad()  { fail=$((fail + 1)); echo "FAIL: $*"; }

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
