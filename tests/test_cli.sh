#!/usr/bin/env bash
# The command line as a user meets it, with the built-in demo model (no
# fixtures needed): help, version, every validation error (one line, naming
# the problem and the fix, the documented exit status, nothing written), the
# demo's defaults and warnings, tokenize and info. test_cli_fixtures.sh does
# the same against the tiny fixture checkpoint.
set -u
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"

expect 0 "" -- --version
grep -q "^cosmos3 " "$tmp/out" && ok || bad "--version output"
for f in "CUDA backend" "tui, line edit" "sixel previews" "serve" "video files" "CPU math"; do
    grep -qE "^  $f +(yes|no|OpenBLAS)" "$tmp/out" && ok || bad "--version does not say whether '$f' is built in: $(cat "$tmp/out")"
done
version=$(cat "$tmp/out")
expect 0 "" -- -V
[ "$(cat "$tmp/out")" = "$version" ] && ok || bad "-V differs from --version: $(cat "$tmp/err")"
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
grep -q '"width":64,"height":64,"frames":1,"steps":20,"guidance":4' "$tmp/out" && grep -q '"model":"demo"' "$tmp/out" &&
    ok || bad "demo defaults: $(cat "$tmp/out")"
[ ! -s "$tmp/err" ] && ok || bad "a prompt of the demo's world warned: $(cat "$tmp/err")"
expect 0 'does not know "dog"' -- gen -p "a purple dog on a white background" --seed 1 -o dog.png -q --device cpu
[ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "it knows: a at background" "$tmp/err" && [ -f dog.png ] && ok || bad "vocabulary warning: $(cat "$tmp/err")"
grep -qF 'drops it, so it reads "a purple on a white background"' "$tmp/err" && ok || bad "the warning does not say what the model reads: $(cat "$tmp/err")"
# "an" is one of the demo's words (it draws the same as "a")
expect 0 "" -- gen -p "a red circle on an orange background" --seed 1 -o an.png -q --device cpu
[ ! -s "$tmp/err" ] && [ -f an.png ] && ok || bad "'an' warned: $(cat "$tmp/err")"
expect 0 "trained at 64x64 only" -- gen -p "a red square on a green background" -W 128 -H 128 --steps 2 -o big.png -q --device cpu
[ -f big.png ] && ok || bad "another size did not generate"
# the device: said once on stderr and in --json, with the reason; --gpus without a GPU refused
expect 0 "" -- gen -p "a red circle on a blue background" --seed 1 -o dev.png
if "$bin" -V | grep -q "CUDA backend *no"; then
    [ "$(grep -c '^device: cpu (no usable GPU: this cosmos3 was built without CUDA)$' "$tmp/err")" = 1 ] && ok ||
        bad "the device line (CPU-only build): $(cat "$tmp/err")"
else
    [ "$(grep -cE '^(device: cuda, GPU|warning: device: cpu \(no usable GPU: .+; --device cpu runs there)' "$tmp/err")" = 1 ] &&
        ok || bad "the device line (CUDA build): $(cat "$tmp/err")"
fi
expect 0 "" -- gen -p "a red circle on a blue background" --seed 1 -o dev.png --overwrite --json -q
grep -qE '"device_note":"device: (cpu \(no usable GPU: .+\)|cuda, GPU)' "$tmp/out" && ok || bad "--json lacks the device note: $(cat "$tmp/out")"
if "$bin" info -m demo | grep -q '^device: cpu'; then
    expect 6 "--gpus 0,1: no usable GPU (" -- gen -p x --gpus 0,1 -o g.png
    expect 6 "--device cuda: no usable GPU (" -- gen -p x --device cuda -o g.png
    [ ! -e g.png ] && ok || bad "a refused --gpus wrote g.png"
fi
expect 2 "--device cpu runs on the CPU; drop one" -- gen -p x --device cpu --gpus 0 -o g.png
rm -f dev.png
# phases on a terminal: the load, each stage and the VAE's chunks on the progress line, the seed
# before the first step; through a pipe no progress line and nothing on stdout
if command -v script > /dev/null; then
    script -qec "'$bin' gen -p 'a red circle on a blue background' -S 12 -o tty.png" /dev/null > tty.raw 2>&1 < /dev/null
    tr '\r' '\n' < tty.raw > tty.txt
    for phase in "loading .*demo \.\.\." "tokenizing the prompt" "reading the prompt \(UND" "step 20/20" \
                 "decoding \(VAE\): 1/1 latent frame" "writing \.\.\." "wrote tty.png \(seed 12, "; do
        grep -qE "$phase" tty.txt && ok || bad "the terminal never showed '$phase': $(cat -v tty.raw | head -c 600)"
    done
    seed_at=$(grep -n '^seed 12$' tty.txt | head -1 | cut -d: -f1)
    step_at=$(grep -n 'step 1/20' tty.txt | head -1 | cut -d: -f1)
    [ -n "$seed_at" ] && [ -n "$step_at" ] && [ "$seed_at" -lt "$step_at" ] && ok || bad "the seed is not shown before the first step"
    rm -f tty.raw tty.txt tty.png
else
    echo "script (util-linux) not installed: the terminal part of the progress check skipped"
fi
"$bin" gen -p "a red circle on a blue background" -S 12 -o pipe.png > pipe.out 2> pipe.err
[ ! -s pipe.out ] && ! grep -q $'\r' pipe.err && grep -q '^wrote pipe.png (seed 12, ' pipe.err && ok ||
    bad "through a pipe: stdout '$(cat pipe.out)', stderr '$(cat -v pipe.err)'"
rm -f pipe.out pipe.err pipe.png
# --from FILE: the stored settings again, the same picture; options after it override, before it not
expect 0 "" -- gen -p "a red circle on a blue background, on the right" -n blurry -S 42 --steps 12 -g 5 -o from.png -q --device cpu
expect 0 "" -- gen --from from.png -o from2.png -q --device cpu
cmp -s from.png from2.png && ok || bad "gen --from did not reproduce the picture byte for byte"
expect 0 "" -- gen -S 7 --steps 3 --from from.png -S 43 -o from3.png -q --device cpu
expect 0 "" -- meta from3.png
grep -qx "seed: 43" "$tmp/out" && grep -qx "steps: 12" "$tmp/out" && grep -qx "guidance: 5" "$tmp/out" &&
    grep -qx "negative_prompt: blurry" "$tmp/out" && ok || bad "--from with options around it: $(cat "$tmp/out")"
grep -qx "numerics: weights as stored, attention fp32" "$tmp/out" && ok ||
    bad "meta of a CPU picture: no numerics line or the wrong one: $(cat "$tmp/out")"
# the numerics asked for are in the metadata: --precision and the GEN attention that ran
expect 0 "" -- gen -p "a red circle" --steps 3 --precision fp8 --attention fp8 -o num8.png -q --device cpu
expect 0 "" -- meta num8.png
grep -qx "numerics: weights fp8, attention fp8" "$tmp/out" && ok || bad "meta of an fp8 picture: $(cat "$tmp/out")"
expect 0 "" -- meta --json num8.png
python3 -c 'import json, sys; l = json.load(open(sys.argv[1]))["layout"]; sys.exit(not (l["precision"] == "fp8" and l["attention"] == "fp8"))' \
    "$tmp/out" && ok || bad "meta --json of an fp8 picture: $(cat "$tmp/out")"
rm -f num8.png
printf 'not a png' > nometa.png
expect 4 "nometa.png" -- gen --from nometa.png -o from4.png -q
expect 4 "" -- gen --from no-such-file.png -o from4.png -q
[ ! -e from4.png ] && ok || bad "a refused --from wrote from4.png"
rm -f from.png from2.png from3.png nometa.png
# the conditioning input is in the result's metadata, and `meta` prints it (file and hash)
if "$bin" -V | grep -q '^  video files      yes'; then
    expect 0 "" -- gen -p "a red circle on a blue background" -S 3 -o still.png -q --device cpu
    expect 0 "" -- gen --image still.png -p "a red circle on a blue background, moving up" -F 9 -S 3 -o up.mp4 -q --device cpu
    expect 0 "" -- meta up.mp4
    grep -qE '^condition: image still.png fnv1a [0-9a-f]{16}$' "$tmp/out" && ok || bad "meta of an i2v clip: $(cat "$tmp/out")"
    rm -f still.png up.mp4
fi
expect 0 "" -- info -m demo
grep -q "^vocabulary (27 words" "$tmp/out" && grep -qF 'cosmos3 gen -p "a red circle on a blue background, on the right"' "$tmp/out" && ok || bad "info -m demo: $(cat "$tmp/out")"
grep -qF "plan for 64x64, 1 frame (the model's default size" "$tmp/out" && ok || bad "info -m demo does not say the size it planned for: $(cat "$tmp/out")"
expect 0 "" -- info -m demo -W 128 -H 96
grep -qF "plan for 128x96, 1 frame (as given)" "$tmp/out" && ok || bad "info -W -H: $(cat "$tmp/out")"
expect 3 "-m demo" -- gen -m no-such-model -p x
printf 'a red circle on a blue background\na green square on a red background\n' >lines.txt
expect 0 "" -- tokenize -m demo --templates -W 64 -H 64 --lines - <lines.txt
cp "$tmp/out" lines.out
expect 0 "" -- tokenize -m demo --templates -W 64 -H 64 "a green square on a red background"
[ "$(wc -l <lines.out)" = 2 ] && [ "$(sed -n 2p lines.out)" = "$(cat "$tmp/out")" ] && ok || bad "tokenize --lines: $(cat lines.out)"

finish cli
