#!/usr/bin/env bash
# The command line against the tiny fixture checkpoint: tokenize's golden
# ids, info and the plan, a generation with a metadata round trip, refusal
# to overwrite, --json, same seed same pixels, video folders and patterns.
# Skips (77) without the fixtures.
set -u
. "${COSMOS3_SRCDIR:?}/tests/fixtures.sh"
[ -n "$fx" ] || { echo "SKIP: fixtures not found (set COSMOS3_FIXTURES or -Dfixtures to the folder with tiny-a/)"; exit 77; }
command -v python3 > /dev/null || { echo "SKIP: python3 not installed (apt-get install python3)"; exit 77; }
model="$fx/tiny-a/model"
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"

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
expect 6 "" -- gen -m "$model" -p x --tp 2 --cfg-parallel 2 --device cuda
grep -qE 'no usable GPU \(.+\); use --device cpu|not enough GPUs: tp 2 x cfg-parallel 2 x ulysses 1 needs 4, found [0-3]; use --tp 1 --cfg-parallel 1,' "$tmp/err" &&
    ok || bad "--device cuda without enough GPUs: $(cat "$tmp/err")"
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
same_pixels j.png j2.png && ok || bad "same seed gave different pixels"
# --from on a checkpoint's image (the folder is given again with -m)
expect 0 "" -- gen -m "$model" --from j.png -o j3.png -q --device cpu
same_pixels j.png j3.png && ok || bad "gen --from did not reproduce the pixels"
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
finish cli_fixtures
