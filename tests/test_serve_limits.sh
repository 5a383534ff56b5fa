#!/usr/bin/env bash
# cosmos3 serve against one hostile client, on the built-in demo model (CPU):
# the API key (401), JSON bodies only (415), the per-request cost limit (400),
# a second client served while one address holds 64 idle connections, header
# deadlines against trickled bytes (tests/serve_limits.js, node built-ins), and
# the start-up refusals (a non-loopback --host needs a key).
set -u
bin=${COSMOS3_BIN:?}
src=${COSMOS3_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
command -v node >/dev/null || { echo "SKIP: node not found"; exit 77; }
if "$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd"; then
    echo "SKIP: built without libmicrohttpd"; exit 77
fi
spid=
cleanup() { [ -n "$spid" ] && kill -9 "$spid" 2>/dev/null; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
mkdir "$tmp/tmpdir"
export TMPDIR="$tmp/tmpdir"
unset COSMOS3_MODEL COSMOS3_API_KEY

# refused before anything loads: exit 2, one line naming the fix
refuse() { # SUBSTRING ARGS...
    local sub=$1; shift
    timeout 20 "$bin" serve --port 0 "$@" > r.out 2> r.err
    local rc=$?
    [ $rc = 2 ] && grep -qF -- "$sub" r.err && [ "$(wc -l < r.err)" = 1 ] && ok ||
        bad "serve $* -> exit $rc, want 2 with '$sub': $(cat r.err)"
}
refuse "--api-key KEY or COSMOS3_API_KEY" --host 0.0.0.0
COSMOS3_API_KEY= refuse "COSMOS3_API_KEY is empty"
refuse "--api-key holds a space" --api-key "a b"
refuse "--max-cost 0 must be at least 1" --max-cost 0

key=k3y-$$-$RANDOM
COSMOS3_TEST_SERVE_DEADLINE=2 COSMOS3_API_KEY=$key serve_start s --max-cost 1 --max-per-client 8 -W 64 -H 64 --steps 2 ||
    { finish serve_limits; exit 1; }
grep -q "requests need 'Authorization: Bearer KEY'" s.err && ok || bad "no key line at start: $(cat s.err)"
for _ in $(seq 300); do grep -q '^cosmos3 serve: ready' s.err && break; sleep 0.1; done
grep -q '^cosmos3 serve: ready' s.err && ok || bad "the server never became ready: $(cat s.err)"
PORT=$port KEY=$key node "$src/tests/serve_limits.js" auth types cost flood trickle && ok || bad "serve_limits.js"
kill -TERM "$spid"
for _ in $(seq 100); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
wait "$spid"; st=$?
[ "$st" = 0 ] && ok || bad "SIGTERM: exit $st: $(tail -3 s.err)"
spid=
left=$(ls -A "$tmp/tmpdir")
[ -z "$left" ] && ok || bad "temporary files left behind: $left"

finish serve_limits
