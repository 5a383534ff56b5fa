#!/usr/bin/env bash
# `cosmos3 bench --e2e` on the CPU with the tiny preset: one distilled 4-step
# request end to end (tokenize, UND, four forwards, VAE decode, the PNG
# written) after a warm-up, on random weights and no checkpoint on disk. The
# report has every phase and they add up; the PNG is written where -o says,
# at the size asked, with the pixels the request decoded (the same request
# twice gives the same bytes, another prompt other pixels); the plan is
# printed; the options that do not fit a distilled image request are
# one-line usage errors (exit 2).
set -u
bin=${COSMOS3_BIN:?}
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
export TMPDIR=$tmp
command -v jq >/dev/null || { echo "SKIP: jq not installed (.ci/setup, or: apt-get install jq)"; exit 77; }

e2e() { # out.json out.png [args...]
    local j=$1 p=$2
    shift 2
    "$bin" bench --preset tiny --device cpu -W 128 -H 96 --e2e --json -o "$p" "$@" >"$j" 2>"$tmp/err"
}
e2e a.json a.png || bad "bench --e2e exited $?: $(cat "$tmp/err")"
jq -e . a.json >/dev/null && ok || bad "bench --e2e --json is not valid JSON: $(cat a.json)"
cat a.json
# four forwards (the distilled t_list), each timed; the phases inside the request
jq -e '.e2e.steps == 4 and (.e2e.step_ms | length) == 4 and all(.e2e.step_ms[]; . > 0)' a.json >/dev/null \
    && ok || bad "e2e: not four timed forwards"
jq -e '.e2e as $e | $e.tokenize_ms > 0 and $e.und_ms > 0 and $e.denoise_ms > 0 and $e.vae_ms > 0
       and $e.png_ms > 0 and $e.first_request_ms > 0
       and ($e.step_ms | add) <= $e.denoise_ms * 1.001
       and $e.tokenize_ms + $e.und_ms + $e.denoise_ms + $e.vae_ms <= $e.request_ms * 1.001
       and $e.request_ms <= $e.request_wall_ms * 1.001
       and (($e.total_ms - $e.request_ms - $e.png_ms) | fabs) < 1e-6 * $e.total_ms' a.json >/dev/null \
    && ok || bad "e2e: phases missing or not adding up"
jq -e '.width == 128 and .height == 96 and .gen_tokens == 12 and .L_cond > 10 and .load_s > 0
       and .vae_load_s >= 0 and .plan_need_bytes >= .plan_weights_bytes and .plan_weights_bytes > 0
       and (.plan | test("per rank: weights")) and .memory.weights_bytes > 0' a.json >/dev/null \
    && ok || bad "e2e: size, plan or memory missing"
jq -e --arg p "a.png" '.e2e.png == $p and .e2e.png_bytes > 0' a.json >/dev/null && ok || bad "e2e: PNG path/bytes"
# the PNG: there, the size asked (IHDR), its byte count as reported
[ -f a.png ] && ok || bad "e2e: no PNG at -o"
[ "$(od -An -tu4 --endian=big -j16 -N8 a.png | tr -s ' ')" = " 128 96" ] && ok || bad "e2e: PNG is not 128x96"
[ "$(stat -c %s a.png)" = "$(jq .e2e.png_bytes a.json)" ] && ok || bad "e2e: PNG size differs from the report"
# the same request again: the same picture; another prompt: another one
e2e b.json b.png || bad "second bench --e2e exited $?"
cmp -s a.png b.png && ok || bad "e2e: the same request gave another PNG"
e2e c.json c.png -p "a blue sphere on a marble floor" || bad "bench --e2e -p exited $?"
cmp -s a.png c.png && bad "e2e: another prompt gave the same PNG" || ok
# --precision fp8 (quantised at load; the CPU holds the weights dequantised):
# judged on the final latents against the bf16 run, not on pixels. In this
# random model the transformer moves the latents little (another prompt moves
# them ~4e-6), so FP8's few-percent change of each product moves them ~2e-7:
# far above float rounding (~1e-13 here), far below one pixel level. A
# skipped quantisation gives 0; a broken one more than the other prompt does.
e2e a2.json a2.png --save-latents a.st || bad "bench --e2e --save-latents exited $?: $(cat "$tmp/err")"
e2e c2.json c2.png -p "a blue sphere on a marble floor" --save-latents c.st || bad "bench --e2e -p --save-latents exited $?"
e2e f.json f.png --precision fp8 --save-latents f.st || bad "bench --e2e --precision fp8 exited $?: $(cat "$tmp/err")"
jq -e '.e2e.steps == 4 and .e2e.total_ms > 0 and .plan_weights_bytes > 0' f.json >/dev/null && ok || bad "e2e fp8 report"
d_fp8=$(latents_rel a.st f.st) && d_prompt=$(latents_rel a.st c.st) || bad "e2e: --save-latents wrote no latents"
echo "latents vs bf16: fp8 ${d_fp8:-?}, another prompt ${d_prompt:-?}"
le 1e-9 "${d_fp8:-0}" && ok || bad "e2e: --precision fp8 left the latents as bf16's (${d_fp8:-?}): not quantised"
le "${d_fp8:-1}" "$(awk -v p="${d_prompt:-0}" 'BEGIN { print p / 2 }')" && ok ||
    bad "e2e: --precision fp8 moved the latents ${d_fp8:-?}, more than half of what another prompt does (${d_prompt:-?})"
# FP8 on the CPU gives the same latents whatever the thread count (the
# products are cut into fixed tiles, not one per thread; E4M3 rounding
# would amplify any difference)
for th in 1 3; do
    OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th e2e f$th.json f$th.png --precision fp8 --save-latents f$th.st ||
        bad "bench --e2e --precision fp8 on $th threads exited $?"
    d=$(latents_rel f.st f$th.st)
    le "${d:-1}" 1e-12 && ok || bad "e2e: --precision fp8 on $th threads gave other latents (${d:-?} relative L2)"
done
expect 2 "add --e2e or drop it" -- bench --preset tiny --device cpu -W 64 -H 64 --save-latents x.st
# the text report names every phase; without -o the PNG goes to TMPDIR and is removed
"$bin" bench --preset tiny --device cpu -W 64 -H 64 --e2e >out.txt 2>"$tmp/err" || bad "e2e text exited $?: $(cat "$tmp/err")"
for w in "plan (checked before the load)" "per rank: weights" "4 steps" "tokenize" "UND" "steps" "VAE" "PNG" "total"; do
    grep -qF -- "$w" out.txt && ok || bad "e2e text report lacks '$w'"
done
ls "$tmp"/cosmos3-bench-e2e.* >/dev/null 2>&1 && bad "e2e left its PNG in TMPDIR" || ok
ls -d "$tmp"/cosmos3-bench-vae.* >/dev/null 2>&1 && bad "e2e left its VAE folder in TMPDIR" || ok

expect 2 "drop --skip-vae" -- bench --preset tiny --device cpu -W 64 -H 64 --e2e --skip-vae
expect 2 "drop --frames 5" -- bench --preset tiny --device cpu -W 64 -H 64 --e2e -F 5
expect 2 "drop --steps 3" -- bench --preset tiny --device cpu -W 64 -H 64 --e2e --steps 3
expect 2 "add --e2e" -- bench --preset tiny --device cpu -W 64 -H 64 -o x.png

finish bench_e2e
