#!/usr/bin/env bash
# vae_gpu.sh - the VAE decode on the GPU machine in one call: correctness
# (vae_lab, the tiny-a VAE goldens on the channels-last bf16 path, the old
# bf16 path and the fp32 check path, the full Wan2.2 VAE bf16 vs fp32) and
# speed (`cosmos3 bench --preset nano` at 1024^2, 480p/93f and 720p/189f
# against bench/vae_ref.py, torch_ref.py's decoder in bf16, on the same VAE
# geometry in the same call).
#
#   bench/vae_gpu.sh pack [BUILD]   here: build BUILD (default build-cuda) and
#       fill PACK (default /work/main/.gpu-vae) with the binaries, their host
#       libraries, the scripts and the tiny-a VAE fixtures
#   bash .gpu-vae/vae_gpu.sh run [parts]   on the GPU machine, from the repo
#       root, with .gpu-vae carried; parts: lab,tests,bench,ref (default), old
#       (also the tiny-a goldens on the generic bf16 path)
# Logs go to $OUT (or /tmp/vae_gpu).
set -u -o pipefail

pack() {
    local here build pk
    here=$(cd "$(dirname "$0")/.." && pwd)
    build=${1:-build-cuda}
    pk=${PACK:-/work/main/.gpu-vae}
    cd "$here" || exit 1
    . bench/carry.sh
    carry_build "$build" cosmos3 tests/test_vae cuda/lab/vae_lab || exit 1
    carry_pack "$pk" "$build" cosmos3 tests/test_vae cuda/lab/vae_lab || exit 1
    cp bench/carry.sh bench/vae_gpu.sh bench/vae_ref.py bench/torch_ref.py "$pk/" || exit 1
    local fx=${COSMOS3_FIXTURES_SRC:-$here/../../shared/fixtures}
    tar czf "$pk/fixtures.tgz" -C "$fx" tiny-a/model/vae tiny-a/golden/vae_decode.safetensors || exit 1
    du -sh "$pk"/*
}

run() {
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
    local pk=.gpu-vae parts=${1:-lab,tests,bench,ref}
    local out=${OUT:-/tmp/vae_gpu}
    mkdir -p "$out"
    . "$pk/carry.sh"
    carry_env "$pk"
    local bin=$pk/cosmos3
    echo "== device"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    ldd "$pk/cosmos3" "$pk/test_vae" "$pk/vae_lab" | grep -E 'not found' | sort -u

    if [[ $parts == *lab* ]]; then
        echo "== vae_lab"
        timeout 240 "$pk/vae_lab" 2>&1 | tee "$out/vae_lab.log"
        echo "vae_lab rc ${PIPESTATUS[0]}"
    fi
    if [[ $parts == *tests* ]]; then
        # fixtures: a tiny checkpoint from mkmodel carrying tiny-a's VAE and the VAE goldens
        local fx=/tmp/vfx
        rm -rf "$fx" && mkdir -p "$fx" && tar -C "$fx" -xzf "$pk/fixtures.tgz" || return 1
        mv "$fx/tiny-a/model/vae" "$fx/vae.tiny-a"
        "$bin" mkmodel --preset tiny --layers 1 --seed 1 -o "$fx/tiny-a/model" --overwrite -q || return 1
        rm -rf "$fx/tiny-a/model/vae" && mv "$fx/vae.tiny-a" "$fx/tiny-a/model/vae"
        export COSMOS3_FIXTURES=$fx OMP_NUM_THREADS=8
        echo "== test_vae cuda bf16, channels-last path (+ full Wan2.2 VAE bf16 vs fp32)"
        COSMOS3_TEST_DEVICE=cuda COSMOS3_TEST_VAE_FULL=/tmp/c3vae timeout 240 "$pk/test_vae" 2>&1 |
            grep -v '^  ' | tee "$out/test_vae_bf16.log" | tail -25
        echo "test_vae bf16 rc ${PIPESTATUS[0]}"
        if [[ $parts == *old* ]]; then
            echo "== test_vae cuda bf16, generic path (COSMOS3_VAE_CL=0)"
            COSMOS3_VAE_CL=0 COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_vae" 2>&1 | tee "$out/test_vae_old.log" |
                grep -E 'decoded|uint8|checks|FAIL' | tail -12
            echo "test_vae old rc ${PIPESTATUS[0]}"
        fi
        echo "== test_vae cuda fp32 check path"
        COSMOS3_CUDA_FP32=1 COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_vae" 2>&1 | tee "$out/test_vae_fp32.log" |
            grep -E 'decoded|uint8|checks|FAIL' | tail -12
        echo "test_vae fp32 rc ${PIPESTATUS[0]}"
    fi
    if [[ $parts == *bench* ]]; then
        echo "== cosmos3 bench --preset nano --layers 1 --steps 1 (the full Wan2.2 VAE decode)"
        for s in 1024x1024x1 832x480x93 1280x720x189; do
            IFS=x read -r W H F <<<"$s"
            timeout 200 "$bin" bench --preset nano --layers 1 --steps 1 -W "$W" -H "$H" -F "$F" --json -q \
                >"$out/bench_$s.json" 2>"$out/bench_$s.err"
            echo "bench $s rc $? vae_decode_ms $(grep -o '"vae_decode_ms": *[0-9.]*' "$out/bench_$s.json" |
                grep -o '[0-9.]*$')"
            tail -2 "$out/bench_$s.err"
        done
    fi
    if [[ $parts == *ref* ]]; then
        echo "== vae_ref.py (torch_ref.py's Wan2.2 decoder, bf16) on /tmp/c3vae"
        [ -d /tmp/c3vae/vae ] || "$bin" mkmodel --preset nano --layers 1 -o /tmp/c3vae --overwrite -q
        timeout 200 python3 "$pk/vae_ref.py" /tmp/c3vae --reps 2 --json-out "$out/vae_ref.json" 2>&1 | tee "$out/vae_ref.log"
    fi
}

case "${1:-}" in
pack) shift; pack "$@" ;;
run) shift; run "$@" ;;
*) sed -n '2,16p' "$0"; exit 2 ;;
esac
