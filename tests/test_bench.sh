#!/usr/bin/env bash
# `cosmos3 bench` on the CPU with the tiny preset: it runs with no checkpoint,
# prints sane numbers, its --json is valid and self-consistent (the FLOPs it
# reports are the PERF-TARGETS.md count recomputed here from the geometry it
# reports; the FLOPs the profiled step executed in matrix products and
# attention equal that count; MFU = TF/s / 989), and bad options are one-line
# usage errors (exit 2).
set -u
bin=${COSMOS3_BIN:?}
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
export TMPDIR=$tmp
command -v jq >/dev/null || { echo "SKIP: jq not installed (.ci/setup, or: apt-get install jq)"; exit 77; }

# text report
"$bin" bench --preset tiny --device cpu -W 128 -H 128 --steps 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 0 ] && ok || bad "bench text exited $rc: $(cat "$tmp/err")"
cat "$tmp/out"
for w in "preset tiny" "GEN tokens S 16" "CFG step (cond + uncond as one batch), mean of 2" "MFU" "matrix products" \
         "attention" "the rest" "VAE decode" "PNG" "peak memory"; do
    grep -qF -- "$w" "$tmp/out" && ok || bad "text report lacks '$w'"
done
ls -d "$tmp"/cosmos3-bench-vae.* >/dev/null 2>&1 && bad "bench left its VAE folder in TMPDIR" || ok

# JSON report: a video size, one layer
"$bin" bench --preset tiny --device cpu --layers 1 -W 64 -H 96 -F 5 --steps 1 --json >"$tmp/j" 2>"$tmp/err"
rc=$?
[ $rc = 0 ] && ok || bad "bench --json exited $rc: $(cat "$tmp/err")"
jq -e . "$tmp/j" >/dev/null && ok || bad "bench --json is not valid JSON: $(cat "$tmp/j")"
cat "$tmp/j"
# geometry and tokens: latent 2 x 6 x 4 -> tokens 2 x 3 x 2
jq -e '.geometry.layers == 1 and .gen_tokens == 12 and .frames == 5 and .L_cond > 10 and .L_uncond > 10' "$tmp/j" \
    >/dev/null && ok || bad "geometry/tokens in JSON"
# FLOPs per CFG step recomputed from the reported geometry (patch dim 192, SwiGLU),
# plus the timestep MLP (256 -> D -> D) once per GEN call
jq -e '
  .geometry as $g | ($g.heads * $g.head_dim) as $q | ($g.kv_heads * $g.head_dim) as $kv |
  ($g.layers * ($g.hidden * $q * 2 + 2 * $g.hidden * $kv + 3 * $g.hidden * $g.intermediate)
     + 2 * $g.hidden * 192) as $wt |
  (2 * 2 * $wt * .gen_tokens + 2 * 2 * ($g.hidden * 256 + $g.hidden * $g.hidden)) as $lin |
  (4 * .gen_tokens * (.L_cond + .L_uncond + 2 * .gen_tokens) * $q * $g.layers) as $att |
  def close(a; b): ((a - b) | fabs) <= 1e-6 * (b | fabs) + 1e-15;
  close(.tflop_per_step_linear * 1e12; $lin) and close(.tflop_per_step_attention * 1e12; $att)
    and close(.tflop_per_step; .tflop_per_step_linear + .tflop_per_step_attention)' "$tmp/j" >/dev/null \
    && ok || bad "FLOP count differs from PERF-TARGETS.md rule"
# the profiled step executed exactly the counted FLOPs; as one CFG batch (the
# default) proj_in and the timestep MLP run once for both branches
executed_flops() {
    jq -e '
      def close(a; b): ((a - b) | fabs) <= 1e-3 * (b | fabs);
      .geometry as $g |
      (if .cfg_batch then 2 * $g.hidden * 192 * .gen_tokens + 2 * ($g.hidden * 256 + $g.hidden * $g.hidden)
       else 0 end) as $shared |
      close(.breakdown.matmul_tflops * .breakdown.matmul_ms / 1e3; .tflop_per_step_linear - $shared / 1e12)
        and close(.breakdown.attention_tflops * .breakdown.attention_ms / 1e3; .tflop_per_step_attention)' "$1"
}
jq -e '.cfg_batch == true' "$tmp/j" >/dev/null && ok || bad "the CFG branches are not batched by default"
executed_flops "$tmp/j" >/dev/null && ok || bad "executed FLOPs differ from the model count (one batch)"
COSMOS3_CFG_BATCH=0 "$bin" bench --preset tiny --device cpu --layers 1 -W 64 -H 96 -F 5 --steps 1 --json \
    >"$tmp/j0" 2>"$tmp/err" || bad "bench with COSMOS3_CFG_BATCH=0: $(cat "$tmp/err")"
jq -e '.cfg_batch == false' "$tmp/j0" >/dev/null && ok || bad "COSMOS3_CFG_BATCH=0 did not turn the batch off"
executed_flops "$tmp/j0" >/dev/null && ok || bad "executed FLOPs differ from the model count (branches one by one)"
# sane times and derived numbers
jq -e '.step_ms > 0 and .step_ms_min <= .step_ms and .step_ms <= .step_ms_max
       and ((.cond_ms + .uncond_ms) - .step_ms | fabs) < 1e-3 * .step_ms
       and ((.tflops * .step_ms / 1e3) - .tflop_per_step | fabs) < 1e-3 * .tflop_per_step
       and ((.mfu * 989) - .tflops | fabs) < 1e-6 * .tflops
       and .breakdown.matmul_ms > 0 and .breakdown.attention_ms > 0 and .breakdown.rest_ms >= 0
       and .breakdown.total_ms >= .breakdown.matmul_ms + .breakdown.attention_ms
       and .outside_loop.und_cond_ms > 0 and .outside_loop.vae_decode_ms > 0 and .outside_loop.vae_decode_warm_ms > 0 and .outside_loop.png_ms > 0
       and .memory.peak_bytes > .memory.weights_bytes and .memory.weights_bytes > 0' "$tmp/j" >/dev/null \
    && ok || bad "times/derived numbers not sane"

# --skip-vae leaves the VAE out
"$bin" bench --preset tiny --device cpu -W 64 -H 64 --steps 1 --skip-vae --json >"$tmp/j2" 2>"$tmp/err"
jq -e '.outside_loop.vae == false and (.outside_loop | has("vae_decode_ms") | not)' "$tmp/j2" >/dev/null \
    && ok || bad "--skip-vae: $(cat "$tmp/err")"

# usage errors: one line, exit 2
expect_usage() {
    local sub=$1; shift
    "$bin" bench "$@" >"$tmp/o" 2>"$tmp/e"
    local rc=$?
    if [ $rc != 2 ] || ! grep -qF -- "$sub" "$tmp/e" || [ "$(wc -l <"$tmp/e")" != 1 ]; then
        bad "cosmos3 bench $* -> exit $rc: $(cat "$tmp/e")"
    else ok; fi
}
expect_usage "huge" --preset huge
expect_usage "multiple of 16" --preset tiny --device cpu -W 100 -H 64 --skip-vae
expect_usage "--frames 6" --preset tiny --device cpu -W 64 -H 64 -F 6 --skip-vae
expect_usage "one rank" --preset tiny --tp 2

finish bench
