#!/usr/bin/env bash
# The command line as a user meets it: help, version, every validation error
# (one line, naming the problem and the fix, the documented exit status,
# nothing written), refusal to overwrite, the plan check, tokenize and info on
# the fixture checkpoint, and a PNG metadata round trip through `meta`.
set -u
bin=${COSMOS3_BIN:?}
fx=${COSMOS3_FIXTURES:-}
model="$fx/tiny-a/model"
have_fx=0; [ -f "$model/model_index.json" ] && have_fx=1
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

expect 0 "" -- --version
grep -q "^cosmos3 " "$tmp/out" && ok || bad "--version output"
expect 0 "" -- --help
grep -q "gen" "$tmp/out" && ok || bad "--help lists gen"
expect 0 "" -- help gen
grep -q -- "--guidance-interval" "$tmp/out" && ok || bad "help gen lists --guidance-interval"
grep -q -- "--tensor-parallel-size" "$tmp/out" && ok || bad "help gen shows the vLLM-Omni spelling"
expect 2 "unknown command" -- frobnicate
expect 2 "no command" -- help frobnicate
expect 2 "no prompt" -- gen
expect 2 "unknown option --bogus" -- gen -p x --bogus 1
expect 2 "needs a value" -- gen -p x --steps
expect 2 "multiple of 16" -- gen -p x -W 100
expect 2 "multiple of 16" -- gen -p x -H 0
expect 2 "1 + 4k" -- gen -p x --frames 4
expect 2 "1..1000" -- gen -p x --steps 0
expect 2 "1..1000" -- gen -p x --negative blurry --steps 0
expect 2 "not an integer" -- gen -p x --steps 2.5
expect 2 "[0, 100]" -- gen -p x -g -1
expect 2 "not a number" -- gen -p x -g abc
expect 2 "not one of" -- gen -p x --schedule cosine
expect 2 "LO,HI" -- gen -p x --guidance-interval 400
expect 2 "LO <= HI" -- gen -p x --guidance-interval 900,100
expect 2 "0..2^63-1" -- gen -p x --seed -5
expect 2 "(0, 1000]" -- gen -p x --shift 0
expect 2 "--steps 4" -- gen -p x --schedule flowmatch4 --steps 6
expect 3 "does not exist" -- gen -m "$tmp/nowhere" -p x
[ -z "$(ls "$tmp" | grep -v '^out$\|^err$')" ] && ok || bad "validation errors left files: $(ls "$tmp")"
mkdir -p "$tmp/empty"
expect 3 "model_index.json" -- info -m "$tmp/empty"

# the built-in demo model: the default, its card's defaults, its warnings
unset COSMOS3_MODEL
expect 0 "" -- gen -p "a red circle on a blue background, on the right" --seed 1 -o demo.png --json --device cpu
python3 -c "import json; o=json.load(open('$tmp/out')); assert (o['model'], o['width'], o['height'], o['steps'], o['guidance']) == ('demo', 64, 64, 20, 4.0), o" && ok || bad "demo defaults: $(cat "$tmp/out")"
[ ! -s "$tmp/err" ] && ok || bad "a prompt of the demo's world warned: $(cat "$tmp/err")"
expect 0 'does not know "dog"' -- gen -p "a purple dog on a white background" --seed 1 -o dog.png -q --device cpu
[ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "it knows: a at background" "$tmp/err" && [ -f dog.png ] && ok || bad "vocabulary warning: $(cat "$tmp/err")"
expect 0 "trained at 64x64 only" -- gen -p "a red square on a green background" -W 128 -H 128 --steps 2 -o big.png -q --device cpu
[ -f big.png ] && ok || bad "another size did not generate"
expect 0 "" -- info -m demo
grep -q "^vocabulary (22 words" "$tmp/out" && grep -qF 'cosmos3 gen -p "a red circle on a blue background, on the right"' "$tmp/out" && ok || bad "info -m demo: $(cat "$tmp/out")"
expect 3 "-m demo" -- gen -m no-such-model -p x
printf 'a red circle on a blue background\na green square on a red background\n' >lines.txt
expect 0 "" -- tokenize -m demo --templates -W 64 -H 64 --lines - <lines.txt
cp "$tmp/out" lines.out
expect 0 "" -- tokenize -m demo --templates -W 64 -H 64 "a green square on a red background"
[ "$(wc -l <lines.out)" = 2 ] && [ "$(sed -n 2p lines.out)" = "$(cat "$tmp/out")" ] && ok || bad "tokenize --lines: $(cat lines.out)"

if [ $have_fx = 1 ]; then
    # tokenize: the golden ids of the plain.sys1 pipeline case and its raw ids
    want=$(python3 -c "
import json,sys
t=json.load(open('$fx/tiny-a/golden/tokenization.json'))
c=[c for c in t['pipeline_cases'] if c['id']=='plain.sys1'][0]
r=[r for r in t['raw_encode'] if r['text']==c['prompt']]
print(' '.join(map(str,c['cond_ids'])))
print(' '.join(map(str,r[0]['ids'])) if r else '')" 2>/dev/null)
    if [ -n "$want" ]; then
        got=$("$bin" tokenize -m "$model" "A red fox jumps over a frozen creek at dawn.")
        [ "$got" = "$(echo "$want" | sed -n 1p)" ] && ok || bad "tokenize: $got"
        raw=$(echo "$want" | sed -n 2p)
        if [ -n "$raw" ]; then
            got=$("$bin" tokenize -m "$model" --raw "A red fox jumps over a frozen creek at dawn.")
            [ "$got" = "$raw" ] && ok || bad "tokenize --raw: $got"
        fi
        got=$(printf 'A red fox jumps over a frozen creek at dawn.' | "$bin" tokenize -m "$model" -)
        [ "$got" = "$(echo "$want" | sed -n 1p)" ] && ok || bad "tokenize - (stdin): $got"
    fi
    expect 4 "UTF-8" -- tokenize -m "$model" --raw "$(printf 'bad \xff byte')"
    # info and the plan
    expect 0 "" -- info -m "$model" --tp 2
    grep -q "2 layers per tower, hidden 64, 4 q heads, 2 KV heads, head dim 32" "$tmp/out" && ok || bad "info geometry: $(cat "$tmp/out")"
    grep -q "tp 2 x cfg-parallel 1 x ulysses 1 = 2 ranks" "$tmp/out" && ok || bad "info plan: $(cat "$tmp/out")"
    grep -q "per rank: weights" "$tmp/out" && ok || bad "info per-rank bytes"
    expect 2 "does not divide the model's 2 KV heads" -- info -m "$model" --tp 4
    expect 2 "does not divide" -- gen -m "$model" -p x --tp 3 --device cpu
    expect 6 "not enough GPUs: tp 2 x cfg-parallel 2 x ulysses 1 needs 4" -- gen -m "$model" -p x --tp 2 --cfg-parallel 2 --device cuda
    # a generation, metadata round trip with a non-ASCII prompt, refusal to overwrite
    prompt="Ein Fuchs springt über den Bach — 狐 🦊"
    expect 0 "" -- gen -m "$model" -p "$prompt" -n "blurry" -W 32 -H 32 --steps 2 --seed 7 -o fox.png -q --device cpu
    [ -f fox.png ] && ok || bad "fox.png not written"
    expect 0 "" -- meta fox.png
    grep -qF "prompt: $prompt" "$tmp/out" && ok || bad "meta prompt: $(cat "$tmp/out")"
    grep -q "seed: 7" "$tmp/out" && ok || bad "meta seed"
    grep -q "steps: 2" "$tmp/out" && ok || bad "meta steps"
    before=$(md5sum fox.png)
    expect 5 "already exists" -- gen -m "$model" -p "other" -W 32 -H 32 --steps 2 --seed 8 -o fox.png -q --device cpu
    [ "$(md5sum fox.png)" = "$before" ] && ok || bad "fox.png changed despite the refusal"
    expect 0 "" -- gen -m "$model" -p "other" -W 32 -H 32 --steps 1 --seed 8 -o fox.png -q --overwrite --device cpu
    [ "$(md5sum fox.png)" != "$before" ] && ok || bad "--overwrite did not replace fox.png"
    ls fox.png.tmp* >/dev/null 2>&1 && bad "temporary file left behind" || ok
    # --json summary
    expect 0 "" -- gen -m "$model" -p "a cube" -W 32 -H 32 --steps 2 --seed 3 -o j.png --json --device cpu
    python3 -c "import json,sys; o=json.load(open('$tmp/out')); assert o['paths']==['j.png'] and o['seed']==3 and 'denoise' in o['seconds']" && ok || bad "--json: $(cat "$tmp/out")"
    # same seed, same image
    expect 0 "" -- gen -m "$model" -p "a cube" -W 32 -H 32 --steps 2 --seed 3 -o j2.png -q --device cpu
    python3 - <<PY && ok || bad "same seed gave different pixels"
import zlib,struct
def idat(p):
    d=open(p,'rb').read(); i=8; out=b''
    while i < len(d):
        n=struct.unpack('>I',d[i:i+4])[0]; t=d[i+4:i+8]
        if t==b'IDAT': out+=d[i+8:i+8+n]
        i+=12+n
    return zlib.decompress(out)
assert idat('$tmp/j.png')==idat('$tmp/j2.png')
PY
    # video: frames in a folder, a pattern, metadata on frame 0
    expect 0 "" -- gen -m "$model" -p "a cube" -W 32 -H 32 --frames 5 --steps 2 --seed 3 -o clip -q --device cpu
    [ "$(ls clip | wc -l)" = 5 ] && [ -f clip/frame_0000.png ] && ok || bad "video folder: $(ls clip)"
    expect 0 "" -- gen -m "$model" -p "a cube" -W 32 -H 32 --frames 5 --steps 2 --seed 3 -o "shots/%03d.png" -q --device cpu
    [ -f shots/000.png ] && [ -f shots/004.png ] && ok || bad "frame pattern: $(ls shots)"
    expect 2 "folder or a pattern" -- gen -m "$model" -p "a cube" -W 32 -H 32 --frames 5 -o clip.png --device cpu
    # --noise: the picture's metadata claims no seed (the seed did not make it)
    expect 0 "" -- gen -m "$model" -p "a cube" -W 32 -H 32 --steps 2 --seed 3 -o l.png --save-latents lat.safetensors -q --device cpu
    expect 0 "" -- gen -m "$model" -p "a cube" -W 32 -H 32 --steps 2 --noise lat.safetensors -o n.png -q --device cpu
    expect 0 "" -- meta n.png
    grep -qi "seed" "$tmp/out" && bad "--noise image claims a seed: $(cat "$tmp/out")" || ok
    grep -q "noise: lat.safetensors" "$tmp/out" && ok || bad "--noise file not in the metadata: $(cat "$tmp/out")"
    expect 4 "needs a tensor 'latents' of shape" -- gen -m "$model" -p "a cube" -W 64 -H 32 --steps 2 --noise lat.safetensors -o n2.png -q --device cpu
else
    echo "fixtures absent: model-based CLI checks skipped"
fi
echo "cli: $pass passed, $fail failed"
[ $fail -eq 0 ] || exit 1
[ $have_fx = 1 ] || exit 77
