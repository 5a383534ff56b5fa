#!/usr/bin/env bash
# cosmos3 serve's job store (--store DIR) on the built-in demo model (CPU),
# through curl:
#   a video completed and downloaded, another one running; the server stopped
#   with SIGTERM (twice: the second cancels the one in flight), then with
#   SIGKILL, and started again on the same store: the completed video is
#   listed and downloads the same bytes, the other one is failed with "the
#   server restarted"; DELETE removes the row and the file; --keep-videos
#   bounds what a restart keeps; image requests leave the store alone
#   refused (one line): a second server on the same store (6), a garbage
#   database (6, nothing written into it), another program's SQLite
#   database (6), a newer schema (6), a store that is not a folder (5)
set -u
bin=${COSMOS3_BIN:?}
for c in curl jq python3; do
    command -v $c >/dev/null || { echo "SKIP: $c not found"; exit 77; }
done
"$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd" && { echo "SKIP: built without libmicrohttpd"; exit 77; }
"$bin" gen -m nowhere -p x -o x.mp4 2>&1 | grep -q "media=disabled" && { echo "SKIP: built with -Dmedia=disabled"; exit 77; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
unset COSMOS3_MODEL COSMOS3_API_KEY
SLOW=1
ldd "$bin" 2>/dev/null | grep -q libasan && SLOW=4
store="$tmp/store"

start() { # NAME ARGS...: a server of the demo model on $store, ready
    local name=$1
    serve_start "$name" -W 64 -H 64 --steps 2 --max-cost 100000 --store "$store" "${@:2}" || return 1
    for _ in $(seq $((300 * SLOW))); do
        grep -q '^cosmos3 serve: ready:' "$name.err" && return 0
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    bad "$name did not get ready: $(cat "$name.err")"; return 1
}
url() { echo "http://127.0.0.1:$port/v1/videos${1:-}"; }
api() { curl -sS --max-time $((30 * SLOW)) "$@"; }
code() { curl -sS -o /dev/null -w '%{http_code}' --max-time $((30 * SLOW)) "$@"; }
create() { # BODY: the new job's id
    api -H 'Content-Type: application/json' -d "$1" "$(url)" | jq -r '.id // empty'
}
# wait_for ID JQ: until the job's object satisfies JQ (60 s; longer under ASan)
wait_for() {
    [ -n "$1" ] || return 1
    for _ in $(seq $((600 * SLOW))); do
        api "$(url "/$1")" | jq -e "$2" > /dev/null && return 0
        sleep 0.1
    done
    return 1
}
# listed ID STATUS [MESSAGE]: GET /v1/videos holds the job with that status
# (and error message)
listed() {
    api "$(url)" > list.json
    jq -e --arg id "$1" --arg st "$2" --arg m "${3:-}" \
        '.data[] | select(.id == $id and .status == $st and ($m == "" or .error.message == $m))' \
        list.json > /dev/null
}
videos() { find "$store/videos" -type f | wc -l; }

small='{"prompt":"a red circle","num_frames":9,"num_inference_steps":2,"size":"64x64","seed":7}'
# enough steps to be running when the server is stopped (it is cancelled)
long='{"prompt":"a blue square","num_frames":65,"num_inference_steps":1000,"size":"64x64"}'

if start s1; then
    a=$(create "$small")
    [ -n "$a" ] && ok || bad "POST /v1/videos gave no id"
    wait_for "$a" '.status == "completed"' && ok || bad "$a did not complete: $(api "$(url "/$a")")"
    api -o a.mp4 "$(url "/$a/content")"
    [ -s a.mp4 ] && ok || bad "no content for $a"
    # the store: a 0700 folder, the MP4 in videos/ written whole
    [ "$(stat -c %a "$store")" = 700 ] && ok || bad "$store is mode $(stat -c %a "$store"), want 700"
    [ "$(videos)" = 1 ] && cmp -s a.mp4 "$store"/videos/*.mp4 && ok || bad "the store's file is not the download: $(ls "$store/videos")"
    [ -f "$store/jobs.db" ] && ok || bad "no $store/jobs.db"
    # an image request: answered in memory, nothing in the store
    c=$(code -H 'Content-Type: application/json' -d '{"prompt":"a red circle","size":"64x64"}' \
        "http://127.0.0.1:$port/v1/images/generations")
    [ "$c" = 200 ] && [ "$(videos)" = 1 ] && ok || bad "image request: $c, store files $(videos)"
    b=$(create "$long")
    [ -n "$b" ] && ok || bad "POST /v1/videos (long) gave no id"
    wait_for "$b" '.status == "in_progress" and .step >= 1' && ok || bad "$b is not running: $(api "$(url "/$b")")"
    # SIGTERM: the job in flight would finish; a second SIGTERM cancels it
    kill -TERM "$spid"
    for _ in $(seq 100); do grep -q "finishing the request in flight" s1.err && break; sleep 0.1; done
    kill -TERM "$spid"
    wait "$spid"; st=$?
    [ "$st" = 0 ] && ok || bad "s1: SIGTERM twice: exit $st: $(tail -3 s1.err)"
fi

if start s2; then
    grep -q "2 video jobs from $store/jobs.db" s2.err && ok || bad "s2 did not say what it restored: $(cat s2.err)"
    listed "$a" completed && ok || bad "after SIGTERM: $a is not listed completed: $(cat list.json)"
    listed "$b" failed "the server restarted" && ok || bad "after SIGTERM: $b is not failed 'the server restarted': $(cat list.json)"
    api -o a2.mp4 "$(url "/$a/content")"
    cmp -s a.mp4 a2.mp4 && ok || bad "after SIGTERM: $a's content differs"
    api "$(url "/$a")" | jq -e '.progress == 100 and .bytes > 0 and .seed == 7' > /dev/null && ok || bad "$a: $(api "$(url "/$a")")"
    c=$(code "$(url "/$b/content")")
    [ "$c" = 409 ] && ok || bad "$b/content: $c, want 409"
    c=$(create "$long")
    wait_for "$c" '.status == "in_progress" and .step >= 1' && ok || bad "$c is not running"
    kill -KILL "$spid"
    wait "$spid" 2>/dev/null
fi

if start s3; then
    listed "$a" completed && ok || bad "after SIGKILL: $a is not listed completed: $(cat list.json)"
    listed "$b" failed "the server restarted" && ok || bad "after SIGKILL: $b: $(cat list.json)"
    listed "$c" failed "the server restarted" && ok || bad "after SIGKILL: $c is not failed 'the server restarted': $(cat list.json)"
    api -o a3.mp4 "$(url "/$a/content")"
    cmp -s a.mp4 a3.mp4 && ok || bad "after SIGKILL: $a's content differs"
    # a new job after the restarts
    d=$(create "$small")
    wait_for "$d" '.status == "completed"' && ok || bad "$d did not complete"
    [ "$(videos)" = 2 ] && ok || bad "store files: $(ls "$store/videos"), want 2"
    # DELETE: the row and the file
    api -X DELETE "$(url "/$a")" | jq -e '.deleted == true' > /dev/null && ok || bad "DELETE $a"
    [ "$(code "$(url "/$a")")" = 404 ] && ok || bad "$a after DELETE: not 404"
    [ "$(videos)" = 1 ] && ok || bad "store files after DELETE: $(ls "$store/videos"), want 1"
    kill -TERM "$spid"
    wait "$spid"; st=$?
    [ "$st" = 0 ] && ok || bad "s3: SIGTERM: exit $st: $(tail -20 s3.err)"
fi

# --keep-videos 1: the restart keeps the newest finished job alone
if start s4 --keep-videos 1; then
    api "$(url)" > list.json
    jq -e --arg d "$d" '.data | length == 1 and .[0].id == $d and .[0].status == "completed"' list.json > /dev/null &&
        ok || bad "--keep-videos 1 after a restart: $(cat list.json)"
    [ "$(videos)" = 1 ] && ok || bad "store files: $(ls "$store/videos")"
    # one server per store
    expect 6 "is in use by another cosmos3 serve" -- serve --port 0 --store "$store"
    kill -TERM "$spid"
    wait "$spid"
fi

# databases that are not ours: refused, one line, nothing written
mkdir g
head -c 16384 /dev/urandom > g/jobs.db
cp g/jobs.db garbage.copy
expect 6 "g/jobs.db is not a cosmos3 job store" -- serve --port 0 --store g
grep -q -- "--store another folder" err && ok || bad "the garbage refusal names no fix: $(cat err)"
cmp -s g/jobs.db garbage.copy && ok || bad "the garbage database was written"
[ ! -e g/jobs.db-wal ] && [ ! -e g/jobs.db-shm ] && [ ! -e g/jobs.db-journal ] && ok || bad "files beside the garbage database: $(ls g)"
mkdir f n
python3 - <<'PY' || bad "python3 could not write the databases"
import sqlite3
c = sqlite3.connect('f/jobs.db'); c.execute('CREATE TABLE notes (t TEXT)'); c.commit(); c.close()
c = sqlite3.connect('n/jobs.db'); c.execute('PRAGMA application_id = 1664313971')
c.execute('PRAGMA user_version = 99'); c.execute('CREATE TABLE videos (id TEXT)'); c.commit(); c.close()
PY
cp f/jobs.db foreign.copy
expect 6 "f/jobs.db is not a cosmos3 job store" -- serve --port 0 --store f
cmp -s f/jobs.db foreign.copy && ok || bad "the foreign database was written"
expect 6 "written by a newer cosmos3 (schema 99" -- serve --port 0 --store n
: > notdir
expect 5 "is not a folder" -- serve --port 0 --store notdir

finish serve_store
