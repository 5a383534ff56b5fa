#!/usr/bin/env bash
# demo_gpu.sh - the demo model's device calls (issue 13).
#
#   bench/demo_gpu.sh pack [BUILD]  here: build BUILD (default build-cuda) and
#       fill carry/demo/ (cosmos3, the judge library, host libraries).
#   bench/demo_gpu.sh train         there (carry ["carry/demo"]): every stage of
#       bench/demo_train.py, then the PyTorch sampler's time per image; the
#       shipped form, scores, the VAE stage file and the log come back in $OUT.
set -u -o pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
pk=carry/demo
. bench/carry.sh

pack() {
    local build=${1:-build-cuda}
    [ -d "$build" ] || meson setup "$build" -Dcuda=enabled || exit 1
    ninja -C "$build" -j2 cosmos3 tests/libdemojudge.so || exit 1
    carry_pack "$pk" "$build" cosmos3 tests/libdemojudge.so || exit 1
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

case "${1:-}" in
pack) shift; pack "$@" ;;
train) train ;;
*) echo "usage: $0 pack [BUILD] | train" >&2; exit 2 ;;
esac
