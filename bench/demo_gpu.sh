#!/usr/bin/env bash
# demo_gpu.sh - the demo model's device calls (issue 13).
#
#   bench/demo_gpu.sh pack [BUILD]  here: build BUILD (default build-cuda) and
#       fill carry/demo/ (cosmos3, the judge library, host libraries).
#   bench/demo_gpu.sh train         there (carry ["carry/demo"]): every stage of
#       bench/demo_train.py, then the PyTorch sampler's time per image; the
#       shipped form, scores, the VAE stage file and the log come back in $OUT.
#   bench/demo_gpu.sh check         there (carry ["carry/demo"]), on the shipped
#       share/models/demo: the CI test's 30 held-out pictures from the C engine
#       on CUDA and on the CPU (the same verdicts?), the C engine's final
#       latents vs the training script's forward (bench/demo_train.py check),
#       and the time per picture and load time side by side with the PyTorch
#       sampler.
set -u -o pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
pk=carry/demo
. bench/carry.sh

pack() {
    local build=${1:-build-cuda}
    carry_build "$build" cosmos3 tests/libdemojudge.so tests/test_demo tests/test_gpu_ranks || exit 1
    carry_pack "$pk" "$build" cosmos3 tests/libdemojudge.so tests/test_demo tests/test_gpu_ranks || exit 1
    du -sh "$pk"/*
}

train() {
    export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
    local out=${OUT:-/tmp/demo_out} w=/tmp/demo_work
    mkdir -p "$out" "$w"
    exec > >(tee "$out/train.log") 2>&1
    carry_env "$pk"
    nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    local t="python3 bench/demo_train.py --work $w --cosmos3 $pk/cosmos3 --judge $pk/libdemojudge.so"
    $t vae ${VAE_ARGS:-} || return 1
    cp "$w/vae.pt" "$out/"
    $t dit ${DIT_ARGS:-} || return 1
    $t score ${SCORE_ARGS:-}
    cp "$w/scores.json" "$out/"
    $t pack --to "$w/ship" || return 1
    cp "$w/ship/transformer/diffusion_pytorch_model.safetensors" "$out/ship-transformer.safetensors"
    cp "$w/ship/vae/diffusion_pytorch_model.safetensors" "$out/ship-vae.safetensors"
    tar czf "$out/ship-meta.tgz" -C "$w" ship/model_index.json ship/transformer/config.json ship/vae/config.json \
        ship/scheduler
    $t bench --ckpt "$w/ship" --json-out "$out/bench_torch.json"
}

check() {
    export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 COSMOS3_SRCDIR=$here OMP_NUM_THREADS=16 OPENBLAS_NUM_THREADS=1
    local out=${OUT:-/tmp/demo_out} w=/tmp/demo_check fails=0
    mkdir -p "$out" "$w"
    exec > >(tee "$out/check.log") 2>&1
    carry_env "$pk"
    nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "=== 1. the CI test's 30 held-out pictures, C engine: CUDA bf16, CUDA fp32 check path, CPU fp32"
    COSMOS3_TEST_DEVICE=cuda "$pk/test_demo" >"$out/verdicts_cuda.txt" || fails=$((fails + 1))
    COSMOS3_CUDA_FP32=1 COSMOS3_TEST_DEVICE=cuda "$pk/test_demo" >"$out/verdicts_cuda_fp32.txt" || fails=$((fails + 1))
    COSMOS3_TEST_DEVICE=cpu "$pk/test_demo" >"$out/verdicts_cpu.txt" || fails=$((fails + 1))
    COSMOS3_GRAPHS=0 COSMOS3_TEST_DEVICE=cuda "$pk/test_demo" >"$out/verdicts_cuda_nographs.txt" || fails=$((fails + 1))
    if cmp -s "$out/verdicts_cuda.txt" "$out/verdicts_cuda_nographs.txt"; then
        echo "CUDA graphs (GEN loop, VAE decode) vs op by op: the same 30 pictures, pixel for pixel"
    else
        echo "CUDA graphs change pictures:"; diff "$out/verdicts_cuda.txt" "$out/verdicts_cuda_nographs.txt"
        fails=$((fails + 1))
    fi
    for v in cuda cuda_fp32; do
        python3 - "$out/verdicts_$v.txt" "$out/verdicts_cpu.txt" "$v" <<'PY' || fails=$((fails + 1))
import sys
a, b = (open(p).read().splitlines() for p in sys.argv[1:3])
def asked(line):  # the verdicts the prompt decides: place only when it names one
    seed, prompt, v = (x.strip() for x in line.split("|")[:3])
    w = v.split()
    return (seed, prompt, w[1], w[3], w[5]) + ((" ".join(w[7:]),) if "," in prompt else ())
verdict = lambda line: "|".join(line.split("|")[:3])  # without the pixel hash
full = sum(verdict(x) != verdict(y) for x, y in zip(a, b)) + abs(len(a) - len(b))
ask = sum(asked(x) != asked(y) for x, y in zip(a, b)) + abs(len(a) - len(b))
print(f"{sys.argv[3]} vs cpu: {len(a)} pictures; every verdict the same on {len(a) - full}; "
      f"the asked verdicts (colours, shape, place when named) the same on {len(a) - ask}")
for x, y in zip(a, b):
    if verdict(x) != verdict(y):
        print(f"  {sys.argv[3]}: {x}\n  cpu:  {y}")
sys.exit(1 if ask else 0)
PY
    done
    echo "=== 2. C engine vs the training script's forward (fp32, TF32 off) on the shipped weights"
    local t="python3 bench/demo_train.py --work $w --cosmos3 $pk/cosmos3 --judge $pk/libdemojudge.so --ckpt share/models/demo"
    $t check --c-devices cpu,cuda --json-out "$out/check.json" || fails=$((fails + 1))
    echo "=== 3. time per 64x64 picture (20 steps, CFG, VAE, PNG), model loaded; load time"
    $t bench --bench-reps 20 --json-out "$out/bench_torch.json" || fails=$((fails + 1))
    for d in cuda cpu; do
        for i in 1 2 3; do
            /usr/bin/time -f "  $d: whole command %e s" "$pk/cosmos3" gen -p "a red circle on a blue background" \
                --device $d -o "$w/t.png" --overwrite -q --json | python3 -c \
                "import json,sys; j=json.load(sys.stdin)['seconds']; print('  gen --json:', {k: round(v, 4) for k, v in j.items()})"
        done
    done
    echo "demo check: $fails failed"
}

case "${1:-}" in
pack) shift; pack "$@" ;;
train) train ;;
check) check ;;
*) echo "usage: $0 pack [BUILD] | train | check" >&2; exit 2 ;;
esac
