#!/usr/bin/env bash
# `mkmodel --random-transformer` through the CLI (CPU): the folder's transformer
# is made in memory on open (transformer/random.json).
#   1. info says the weights are random, made on load (text and --json); --check passes
#   2. gen on a --distilled --seed 1 folder gives the pixels `cosmos3 bench
#      --e2e` gives for the same preset (its in-memory checkpoint and its
#      throw-away VAE of seed 1): tiny, and the demo geometry
#      --tp 2 equals world 1, --precision fp8 (quantised on load) runs
#   3. a bad random.json: exit 3, one line naming the file, nothing written;
#      --random-transformer --fp8: exit 2, nothing written
#   4. serve -m DIR answers one picture, the pixels gen gives
set -u
bin=${COSMOS3_BIN:?}
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
# bench's default prompt (src/bench.c BENCH_DEFAULT_PROMPT)
P="A red fox jumps over a frozen creek at dawn, low sun behind snowy pines, breath visible in the cold air, shallow depth of field, cinematic lighting."

# 1. info
"$bin" mkmodel --preset tiny --random-transformer -o tiny -q || bad "mkmodel tiny"
[ -f tiny/transformer/random.json ] && [ ! -e tiny/transformer/diffusion_pytorch_model.safetensors ] &&
    [ -f tiny/vae/diffusion_pytorch_model.safetensors ] && ok || bad "the folder: $(find tiny | tr '\n' ' ')"
"$bin" info -m tiny > info.txt 2>&1
grep -q "^weights: random, made in memory on load (transformer/random.json: c3_random_weight" info.txt &&
    ok || bad "info: $(cat info.txt)"
"$bin" info --json -m tiny 2>/dev/null | python3 -c '
import json, sys
r = json.load(sys.stdin)["random_weights"]
sys.exit(0 if r == {"generator": "c3_random_weight", "amplitude": 0.03, "made": "on load"} else 1)' &&
    ok || bad "info --json: no random_weights object"
"$bin" info --check -m tiny -W 64 -H 64 2>&1 | grep -q "^check: ok: 251 tensors with the dtypes they must have" &&
    ok || bad "info --check: $("$bin" info --check -m tiny -W 64 -H 64 2>&1 | tail -1)"

# 2. gen on the folder = bench --e2e's in-memory checkpoint, pixel for pixel
for g in tiny:64x64 demo:96x64; do
    p=${g%%:*} w=${g#*:}
    "$bin" mkmodel --preset "$p" --distilled --seed 1 --random-transformer -o "e2e_$p" -q || bad "mkmodel $p"
    "$bin" bench --preset "$p" --e2e -W "${w%x*}" -H "${w#*x}" -o "bench_$p.png" -q > "bench_$p.txt" 2>&1 ||
        bad "bench --e2e $p: $(tail -2 "bench_$p.txt")"
    "$bin" gen -m "e2e_$p" -p "$P" -W "${w%x*}" -H "${w#*x}" --seed 1 -o "gen_$p.png" -q 2> "gen_$p.err" ||
        bad "gen $p: $(cat "gen_$p.err")"
    same_pixels "bench_$p.png" "gen_$p.png" && ok || bad "$p $w: gen on the folder differs from bench --e2e"
done

# the layouts and --precision fp8 read the same buffer (a TP rank's column slices gathered from
# it, FP8 quantised on load from it): tp 2 = world 1 within the layouts' bound, FP8 finite
g=(gen -m tiny -p "a red cube" -W 64 -H 64 --steps 3 --seed 2 -q --overwrite)
"$bin" "${g[@]}" --save-latents w1.st -o w1.png && "$bin" "${g[@]}" --tp 2 --save-latents tp2.st -o tp2.png &&
    "$bin" "${g[@]}" --precision fp8 --save-latents f8.st -o f8.png || bad "gen tp 2 / fp8 on the folder"
r=$(latents_rel w1.st tp2.st) && le "$r" 1e-5 && ok || bad "tp 2 vs world 1: rel L2 $r"
r=$(latents_rel w1.st f8.st) && le "$r" 5e-2 && ok || bad "--precision fp8 vs bf16: rel L2 $r"

# 3. bad input
cp -r tiny bad
for text in '{oops' '{"generator": "xorshift"}' '{"generator": "c3_random_weight", "amplitude": -1}'; do
    printf '%s' "$text" > bad/transformer/random.json
    expect 3 "bad/transformer/random.json" -- gen -m bad -p x -W 64 -H 64 --steps 1 -o bad.png
    [ ! -e bad.png ] && ok || bad "random.json $text: bad.png written"
done
expect 2 "--precision fp8" -- mkmodel --preset tiny --random-transformer --fp8 -o fp8
[ ! -e fp8 ] && ok || bad "--random-transformer --fp8 wrote fp8/"

# 4. serve answers one picture, gen's pixels
"$bin" gen -m tiny -p "a red cube" -W 64 -H 64 --seed 5 --steps 2 -o ref.png -q || bad "gen ref"
if "$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd"; then
    echo "serve: built without libmicrohttpd, skipped"
elif serve_start srv -m tiny; then
    python3 - "$port" <<'PY' && ok || bad "serve: $(tail -3 srv.err)"
import base64, http.client, json, sys, time
for _ in range(300):  # ready once /health answers 200 (the weights made and loaded)
    try:
        c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
        c.request("GET", "/health")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=120)
body = {"prompt": "a red cube", "size": "64x64", "seed": 5, "num_inference_steps": 2}
c.request("POST", "/v1/images/generations", json.dumps(body), {"Content-Type": "application/json"})
r = c.getresponse()
d = r.read()
assert r.status == 200, (r.status, d[:300])
open("serve.png", "wb").write(base64.b64decode(json.loads(d)["data"][0]["b64_json"]))
PY
    same_pixels ref.png serve.png && ok || bad "serve's picture differs from gen's"
    kill -TERM "$spid"
    wait "$spid" 2>/dev/null
fi
finish random_cli
