#!/usr/bin/env bash
# serve --replicas 2 --max-batch 4 on the demo model (CPU): issue 32's acceptance.
# tests/serve/replicas_test.js sends 8 image requests (two of them first, with
# more steps, to keep both replicas busy) and 2 clip requests through the
# OpenAI JS client and curl, cancels one more request mid-batch and sends
# malformed ones during it; then here every result is judged by the demo judge
# (tests/demo_judge_cli.c) and compared with the same request run alone by
# `cosmos3 gen` (the same uint8 pixels but for single-level flips). Also: the
# layout line (the CPU's cores divided), and the replicas checked against the
# GPUs before any weight loads.
set -u
bin=${COSMOS3_BIN:?}
src=${COSMOS3_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
judge=${COSMOS3_DEMO_JUDGE:?COSMOS3_DEMO_JUDGE must point at demo_judge_cli}
model="$src/share/models/demo"
js="$src/tests/serve"
[ -d "$js/node_modules/openai" ] || { echo "SKIP: the openai npm package is missing (.ci/setup, or: cd tests/serve && npm ci)"; exit 77; }
command -v node >/dev/null || { echo "SKIP: node not installed (.ci/setup, or: apt-get install nodejs npm)"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
if "$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd"; then
    echo "SKIP: built without libmicrohttpd"; exit 77
fi
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
MAX_FLIPS=0.01 # of a result's bytes: single-level flips (rounding) at most this many

# the requests: prompt|seed|steps|guidance|via
blockers=("a red circle on a blue background|1|300|-|client" "a yellow square on a black background|2|300|-|curl")
images=("a white triangle on a green background|3|120|-|client"
        "a orange square on a purple background|4|120|5|curl"
        "a blue circle on a yellow background|5|120|-|client"
        "a green triangle on a red background|6|120|4|curl"
        "a purple circle on a white background|7|120|-|client"
        "a black square on a orange background|8|120|-|curl")
cancel="a green square on a white background|99|120|-|curl"
clips=("a red circle on a blue background, moving to the right|11|9|-|client"
       "a white square on a black background, moving up|12|9|-|curl")
# the words the judge answers for each: bg colour shape motion
declare -A want=([1]="blue red circle -" [2]="black yellow square -" [3]="green white triangle -"
                 [4]="purple orange square -" [5]="yellow blue circle -" [6]="red green triangle -"
                 [7]="white purple circle -" [8]="orange black square -" [11]="blue red circle right"
                 [12]="black white square up")
spec() { # LINE [clip]: one JSON object
    IFS='|' read -r p s n g v <<< "$1"
    local extra=""
    [ "$g" != - ] && extra=", \"guidance\": $g"
    if [ "${2:-}" = clip ]; then
        printf '{"prompt": "%s", "seed": %s, "frames": %s, "via": "%s"}' "$p" "$s" "$n" "$v"
    else
        printf '{"prompt": "%s", "seed": %s, "steps": %s, "via": "%s"%s}' "$p" "$s" "$n" "$v" "$extra"
    fi
}
list() { local kind=$1 sep=""; shift; printf '['; for x in "$@"; do printf '%s' "$sep"; spec "$x" "$kind"; sep=", "; done; printf ']'; }
specs="{\"blockers\": $(list img "${blockers[@]}"), \"images\": $(list img "${images[@]}"),
        \"cancel\": $(spec "$cancel"), \"clips\": $(list clip "${clips[@]}")}"

# the same requests run alone: cosmos3 gen, one after the other
for x in "${blockers[@]}" "${images[@]}"; do
    IFS='|' read -r p s n g v <<< "$x"
    gargs=(); [ "$g" != - ] && gargs=(-g "$g")
    "$bin" gen -m "$model" -p "$p" -S "$s" --steps "$n" "${gargs[@]}" -q -o "alone_$s.png" ||
        bad "cosmos3 gen seed $s"
done
for x in "${clips[@]}"; do
    IFS='|' read -r p s n g v <<< "$x"
    "$bin" gen -m "$model" -p "$p" -S "$s" --frames "$n" -q -o "alone_$s.mp4" || bad "cosmos3 gen clip seed $s"
done

# the replicas are checked against the GPUs before any weight loads (no GPU here:
# --device cuda finds none); their count and the batch bound are checked
"$bin" serve -m "$model" --port 0 --device cuda --gpus 0,1,2,3,4,5,6,7 --replicas 4 --tp 2 \
    --cfg-parallel 2 2> g.err
rc=$?
[ $rc = 6 ] && grep -q "replicas 4 x (tp 2 x cfg 2) = 16 GPUs, found 8: use --replicas 2$" g.err &&
    [ "$(wc -l < g.err)" = 1 ] && ok || bad "replicas on too few GPUs: rc $rc $(cat g.err)"
"$bin" serve -m "$model" --port 0 --device cuda --replicas 2 2> g2.err
rc=$?
[ $rc = 6 ] && grep -q "replicas 2 x (tp 1 x cfg 1) = 2 GPUs, found 0: use --device cpu$" g2.err &&
    [ "$(wc -l < g2.err)" = 1 ] && ok || bad "replicas without GPUs: rc $rc $(cat g2.err)"
expect 2 "--replicas 0 must be in 1..64" -- serve -m "$model" --port 0 --replicas 0
expect 2 "--max-batch 65 must be in 0..64" -- serve -m "$model" --port 0 --max-batch 65

# the server
serve_start s -m "$model" --replicas 2 --max-batch 4 || exit 1
grep -q "^cosmos3 serve: 2 replicas of tp 1 x cfg-parallel 1 x ulysses 1 on the CPU share its [0-9]* cores: [0-9]* threads\? each" s.err &&
    ok || bad "the layout line: $(cat s.err)"
for _ in $(seq 300); do grep -q '^cosmos3 serve: ready: ' s.err && break; sleep 0.1; done
grep -q '^cosmos3 serve: ready: demo on cpu (tp 1 x cfg-parallel 1 x ulysses 1) x 2 replicas' s.err &&
    ok || bad "ready line: $(cat s.err)"
mkdir -p results
BASE="http://127.0.0.1:$port" node "$js/replicas_test.js" "$specs" "$tmp/results" > js.log 2>&1
rc=$?
cat js.log
[ $rc = 0 ] && ok || bad "replicas_test.js (exit $rc)"
kill -TERM "$spid"
for _ in $(seq 200); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
wait "$spid"; rc=$?
[ $rc = 0 ] && grep -q 'cosmos3 serve: stopped' s.err && ok || bad "SIGTERM: exit $rc: $(tail -3 s.err)"

# every result right (the demo judge) and equal to the request alone
for s in 1 2 3 4 5 6 7 8 11 12; do
    f=results/img_$s.png a=alone_$s.png
    [ "$s" -gt 10 ] && f=results/clip_$s.mp4 a=alone_$s.mp4
    [ -s "$f" ] || { bad "no result for seed $s"; continue; }
    v=$("$judge" judge "$f" | cut -d' ' -f2-)
    [ "$v" = "${want[$s]}" ] && ok || bad "seed $s judged '$v', want '${want[$s]}'"
    read -r _ frames _ bytes _ worse _ flips <<< "$("$judge" compare "$a" "$f")"
    echo "seed $s: judged '$v'; against the request alone: $frames frame(s), $bytes bytes, ${worse:-?} off by more than one level, ${flips:-?} single-level flips"
    [ "${worse:-x}" = 0 ] && le "$flips" "$(awk -v b="$bytes" -v m=$MAX_FLIPS 'BEGIN { print b * m }')" && ok ||
        bad "seed $s differs from the request alone: ${worse:-?} bytes by more than one level, ${flips:-?} flips of ${bytes:-?}"
done
finish serve_replicas
