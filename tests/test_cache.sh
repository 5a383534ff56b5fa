#!/usr/bin/env bash
# The step cache through the command line (issue 34): a cached picture's
# metadata reproduces it byte for byte through gen --from and meta shows the
# cache; bad settings are refused in one line (exit 2); image-to-video runs
# with the cache on and skips steps; the distilled 4-step sampler runs with
# it off, said once.
set -u
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"

expect 2 "not one of none|sea|fb" -- gen -p "a red square" --cache bogus -o x.png
expect 2 "cache threshold" -- gen -p "a red square" --cache sea --cache-threshold -1 -o x.png
expect 2 "cache max skip" -- gen -p "a red square" --cache sea --cache-max-skip -3 -o x.png
[ ! -e x.png ] && ok || bad "a refused request wrote x.png"

# a cached picture, its metadata, and the same bytes from --from
expect 0 "" -- gen -p "a red square at the top left" -S 5 --cache sea -o a.png -q --json
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["cache"]; sys.exit(0 if c["kind"]=="sea" and c["steps_cached"]>=5 else 1)' "$tmp/out" \
    && ok || bad "gen --json: no cache object with >= 5 cached steps: $(cat "$tmp/out")"
expect 0 "" -- meta a.png
grep -q "^cache: sea" "$tmp/out" && grep -q "^cache_threshold: 0.25" "$tmp/out" &&
    grep -qE "^steps cached: [0-9]+ of 20" "$tmp/out" && ok \
    || bad "meta does not show the cache: $(cat "$tmp/out")"
expect 0 "" -- gen --from a.png -o b.png -q
cmp -s a.png b.png && ok || bad "gen --from a cached picture gave other bytes"
expect 0 "" -- gen -p "a red square at the top left" -S 5 -o plain.png -q
cmp -s a.png plain.png && bad "the cached picture equals the plain one byte for byte" || ok

# image-to-video with the cache on (a tiny random model: a high threshold skips)
"$bin" mkmodel --preset tiny --seed 3 -o tiny -q 2>mk.err && ok || bad "mkmodel: $(cat mk.err)"
expect 0 "" -- gen -m tiny -p "a cube" -W 32 -H 32 --frames 9 --image a.png --steps 8 \
    --cache sea --cache-threshold 5 --device cpu -o v.mp4 -q --json
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["cache"]; sys.exit(0 if c["steps_cached"]>=1 else 1)' "$tmp/out" \
    && ok || bad "image-to-video with --cache sea skipped nothing: $(cat "$tmp/out")"
expect 0 "" -- gen -m tiny -p "a cube" -W 32 -H 32 --frames 9 --image a.png --steps 8 \
    --cache fb --cache-threshold 5 --device cpu -o v2.mp4 -q --json
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["cache"]; sys.exit(0 if c["steps_cached"]>=1 else 1)' "$tmp/out" \
    && ok || bad "image-to-video with --cache fb skipped nothing: $(cat "$tmp/out")"

# the distilled sampler: the cache is off, one warning says so
"$bin" mkmodel --preset tiny --distilled --seed 3 -o dist -q 2>mk.err && ok || bad "mkmodel --distilled: $(cat mk.err)"
expect 0 "" -- gen -m dist -p "a cube" -W 32 -H 32 --cache sea --device cpu -o d.png --json
[ "$(grep -c "cache: off for the distilled" "$tmp/err")" = 1 ] && ok \
    || bad "the distilled run does not say once that the cache is off: $(cat "$tmp/err")"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["cache"]; sys.exit(0 if c["steps_cached"]==0 else 1)' "$tmp/out" \
    && ok || bad "the distilled run skipped steps: $(cat "$tmp/out")"

# serve --result-cache 8: a repeated request is answered from the cache (the
# same bytes, marked), one with a knob changed or without a seed runs
if "$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd"; then
    echo "serve: built without libmicrohttpd, skipped"
else
    pids=()
    cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
    expect 2 "--result-cache -1 must be" -- serve --port 0 --result-cache -1
    if serve_start srv --result-cache 8; then
        python3 - "$port" <<'PY' && ok || bad "serve --result-cache: $(cat srv.err)"
import json, sys, time, urllib.request
base = "http://127.0.0.1:%s" % sys.argv[1]
for _ in range(300):
    try:
        if urllib.request.urlopen(base + "/health").status == 200: break
    except Exception: pass
    time.sleep(0.1)
def gen(**kw):
    body = dict(prompt="a blue circle on a white background", size="64x64", **kw)
    rq = urllib.request.Request(base + "/v1/images/generations", json.dumps(body).encode(),
                                {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(rq, timeout=120))["data"][0]
a = gen(seed=9)
b = gen(seed=9)
c = gen(seed=9, num_inference_steps=12)
d = gen(seed=9, extra_params={"cache": "sea"})
e, f = gen(), gen()
fails = []
if a.get("cached"): fails.append("the first request was marked cached")
if not b.get("cached") or b["b64_json"] != a["b64_json"] or b["seed"] != 9:
    fails.append("the repeated request was not answered from the cache with the same bytes")
if c.get("cached") or c["b64_json"] == a["b64_json"]: fails.append("another step count came from the cache")
if d.get("cached"): fails.append("another step cache setting came from the cache")
if e.get("cached") or f.get("cached"): fails.append("a random seed came from the cache")
print("\n".join(fails))
sys.exit(1 if fails else 0)
PY
        kill "$spid" 2>/dev/null
    fi
fi

finish cache
