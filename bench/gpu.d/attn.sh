# shellcheck shell=bash
#     attn     attention (issue 24 items 3-4): cuda/lab/attention_lab (every variant vs a float32
#              reference, NaN-poisoned outputs; the shipped bf16 kernel and FP8 with and without
#              its quantise passes timed at ATTN_SIZES, default 9360,44160 queries; then the
#              not yet measured variants, --experimental: 3 K/V stages, persistent schedule)
#              beside torch SDPA cuDNN in the same call; test_attn on CUDA (the FP8 kernel vs the CPU's
#              emulation and vs fp32); cosmos3 bench Nano 9 layers 720p/189f 2 steps with
#              --attention bf16 and fp8 (the step and attention ratios); the demo model judged
#              with --attention fp8 on CUDA (head_dim 32: runs bf16 and warns) and on the CPU
#              (emulated). ATTN_SKIP="lab cudnn test bench demo" leaves parts out
# pk, out, bin, fails: gpu.sh's (this file is sourced there)
# shellcheck disable=SC2154
# shellcheck disable=SC2034 # files: read by gpu.sh's pack
files+=(cuda/lab/attention_lab tests/test_attn)

sec_attn() {
    local skip=" ${ATTN_SKIP:-} " rc a sizes=${ATTN_SIZES:-9360,44160}
    if [[ $skip != *" lab "* ]]; then
        section "attn: attention_lab (checks; timings at $sizes: bf16 bk176 shipped, fp8 with and without its passes)"
        if [ -x "$pk/attention_lab" ]; then
            timeout 150 "$pk/attention_lab" --only bk176,fp8 --sizes "$sizes" 2>&1 | tee "$out/attn_lab.log" |
                grep -v -E '^  .* ok$' | grep -v '^$'
            rc=${PIPESTATUS[0]}
            grep -E 'S +(9360|44160).*(bk176|fp8)' "$out/attn_lab.log"
            counted "attention_lab" "$rc"
            section "attn: attention_lab --experimental (lab only, not in the product: v7 3 stages, v8 persistent, fp8 3-4 stages)"
            timeout 60 "$pk/attention_lab" --experimental --sizes "$sizes" 2>&1 | tee "$out/attn_lab_exp.log" |
                grep -v -E '^  .* ok$' | grep -v '^$'
            rc=${PIPESTATUS[0]}
            grep -E 'S +(9360|44160)' "$out/attn_lab_exp.log"
            counted "attention_lab --experimental" "$rc"
        else
            echo "attention_lab not carried (pack without bench/gpu.d/attn.sh's files)"
            counted "attention_lab" 1
        fi
    fi
    if [[ $skip != *" cudnn "* ]]; then
        section "attn: torch SDPA (cuDNN, flash2) on the same shapes, same call"
        # shellcheck disable=SC2086 # the sizes: words
        timeout 120 python3 cuda/lab/attention_cudnn.py ${sizes//,/ } 2>&1 | tee "$out/attn_cudnn.log"
        counted "attention_cudnn.py" "${PIPESTATUS[0]}"
    fi
    if [[ $skip != *" test "* ]]; then
        section "attn: test_attn on CUDA (FP8 kernel vs the CPU emulation, both vs fp32; bf16 vs fp32)"
        COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_attn" > "$out/test_attn_cuda.txt" 2>&1
        rc=$?
        cat "$out/test_attn_cuda.txt"
        counted "test_attn (cuda)" "$rc"
    fi
    if [[ $skip != *" bench "* ]]; then
        section "attn: cosmos3 bench nano 9 layers 720p/189f 2 steps, --attention bf16 vs fp8"
        for a in bf16 fp8; do
            timeout 200 "$bin" bench --preset nano --layers 9 -W 1280 -H 720 -F 189 --steps 2 --skip-vae \
                --attention "$a" --json > "$out/attn_bench_$a.json" 2> "$out/attn_bench_$a.err"
            rc=$?
            tail -3 "$out/attn_bench_$a.err"
            counted "bench --attention $a" "$rc"
        done
        python3 - "$out/attn_bench_bf16.json" "$out/attn_bench_fp8.json" <<'PY'
import json, sys
try:
    b, f = (json.load(open(p)) for p in sys.argv[1:3])
except Exception as e:
    print(f"bench JSON unreadable: {e}")
    sys.exit(0)
for name, j in (("bf16", b), ("fp8", f)):
    k = j["breakdown"]
    print(f"{name:4s}: GEN attention {j['attention']}; CFG step {j['step_ms']:.1f} ms; profiled attention "
          f"{k['attention_ms']:.1f} ms at {k['attention_tflops']:.1f} TF/s, matmul {k['matmul_ms']:.1f} ms, "
          f"rest {k['rest_ms']:.1f} ms")
print(f"fp8 vs bf16: step (fps-equivalent) x{b['step_ms'] / f['step_ms']:.3f}, attention "
      f"x{b['breakdown']['attention_ms'] / f['breakdown']['attention_ms']:.3f}")
PY
    fi
    if [[ $skip != *" demo "* ]]; then
        section "attn: the demo model judged with --attention fp8 (CUDA: head_dim 32 declines to bf16; CPU: emulated)"
        for d in cuda cpu; do
            COSMOS3_TEST_DEVICE=$d COSMOS3_TEST_ATTENTION=fp8 timeout 300 "$pk/test_demo" \
                > "$out/attn_demo_$d.txt" 2> "$out/attn_demo_$d.err"
            rc=$?
            grep -v '^seed' "$out/attn_demo_$d.txt" | tail -4
            tail -4 "$out/attn_demo_$d.err"
            counted "test_demo --attention fp8 ($d)" "$rc"
        done
    fi
}
