#!/usr/bin/env bash
# gpu_ranks.sh - GPU ranks and layerwise offload on the GPU machine, one call.
#
#   bench/gpu_ranks.sh pack [BUILD]   here (no GPU): build BUILD (default
#       build-rankc, -Dcuda=enabled) and fill carry/gpu_ranks/ with cosmos3,
#       test_gpu_ranks and an xz tarball of the host libraries the GPU image
#       lacks (as bench/gpu_check.sh does).
#   bench/gpu_ranks.sh run            on the GPU machine, from the repo root:
#       1. test_gpu_ranks: every layout with world <= 8 as ranks sharing GPU 0
#          (device-memory communicator) vs world 1 on CUDA, a random tiny
#          checkpoint at 80x48; --offload vs resident (bit-identical); the
#          offload H2D rate on a 2-layer `mkmodel --preset nano` checkpoint;
#       2. compute-sanitizer memcheck on one tiny run with shared-GPU ranks
#          (tp 2 on GPU 0) and --offload.
#
# With the device tool:  run(command="bash bench/gpu_ranks.sh run", carry=["carry/gpu_ranks"])
# Logs go to $OUT (the device tool's output folder) or /tmp/gpu_ranks.
set -u -o pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
pk=carry/gpu_ranks

pack() {
    local build=${1:-build-rankc}
    [ -d "$build" ] || meson setup "$build" -Dcuda=enabled || exit 1
    ninja -C "$build" -j2 cosmos3 tests/test_gpu_ranks || exit 1
    rm -rf "$pk" && mkdir -p "$pk/lib"
    cp "$build/cosmos3" "$build/tests/test_gpu_ranks" "$pk/"
    ldd "$pk/cosmos3" "$pk/test_gpu_ranks" | awk '/=> \//{print $3}' | sort -u |
        grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/libcu|/libnccl' |
        while read -r lib; do cp -L "$lib" "$pk/lib/"; done
    tar -C "$pk/lib" -cJf "$pk/libs.tar.xz" . && rm -rf "$pk/lib"
    du -sh "$pk"/*
}

run() {
    export NCCL_NVLS_ENABLE=0
    local out=${OUT:-/tmp/gpu_ranks}
    mkdir -p "$out"
    local libs=/tmp/c3libs
    mkdir -p "$libs" && tar -C "$libs" -xJf "$pk/libs.tar.xz"
    local cudalib=/usr/local/cuda/lib64
    [ -e "$cudalib/libcublasLt.so.13" ] || cudalib=$(dirname "$(find / -name 'libcublasLt.so.13' -print -quit 2>/dev/null)")
    export LD_LIBRARY_PATH="$libs:$cudalib:${LD_LIBRARY_PATH:-}"
    [ -e /work/main ] || { mkdir -p /work && ln -s "$here" /work/main; }
    export COSMOS3_SRCDIR=$here OMP_NUM_THREADS=4 OPENBLAS_NUM_THREADS=1

    echo "== device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
    echo "== commit: $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    ldd "$pk/cosmos3" | grep -E 'not found' && return 1

    echo "== nano 2-layer checkpoint"
    local nano=/tmp/c3nano2 t0
    t0=$(date +%s)
    timeout 45 "$pk/cosmos3" mkmodel --preset nano --layers 2 --seed 3 -o "$nano" --overwrite -q ||
        { echo "mkmodel nano failed"; nano=; }
    echo "made in $(( $(date +%s) - t0 )) s"

    echo "== test_gpu_ranks"
    t0=$(date +%s)
    COSMOS3_NANO2=$nano timeout 100 "$pk/test_gpu_ranks" 2>&1 | tee "$out/gpu_ranks.log"
    local rc_test=$?
    echo "test_gpu_ranks: rc $rc_test in $(( $(date +%s) - t0 )) s"

    echo "== compute-sanitizer memcheck: tiny, tp 2 on GPU 0, --offload"
    local cs=/usr/local/cuda/bin/compute-sanitizer
    [ -x "$cs" ] || cs=$(command -v compute-sanitizer || find / -name compute-sanitizer -type f -print -quit 2>/dev/null)
    if [ -n "$cs" ] && [ -x "$cs" ]; then
        local tiny=/tmp/c3tiny8
        "$pk/cosmos3" mkmodel --preset tiny --layers 2 --seed 5 -o "$tiny" --overwrite -q
        t0=$(date +%s)
        timeout 60 "$cs" --tool memcheck --leak-check no --error-exitcode 9 \
            "$pk/cosmos3" gen -m "$tiny" -p "a red cube on a wooden table" -W 80 -H 48 -s 2 -S 7 \
            --device cuda --gpus 0,0 --tp 2 --offload -o /tmp/cs.png --overwrite -q \
            2>&1 | tail -n 25 | tee "$out/memcheck.log"
        echo "memcheck: rc ${PIPESTATUS[0]} in $(( $(date +%s) - t0 )) s"
    else
        echo "memcheck: compute-sanitizer not found on this machine"
    fi
    return $rc_test
}

case "${1:-}" in
pack) shift; pack "$@" ;;
run) run ;;
*) sed -n '2,18p' "$0"; exit 2 ;;
esac
