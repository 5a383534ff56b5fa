#!/usr/bin/env bash
# gpu_check.sh - build, check and time the CUDA backend on the GPU machine in
# one call. Two halves:
#
#   bench/gpu_check.sh pack [BUILD]    here (no GPU): build BUILD (default
#       build-cuda, configured with -Dcuda=enabled) and fill carry/gpu/ with
#       ops_check, cosmos3 and an xz tarball of the host libraries they use
#       that the GPU image may lack (OpenBLAS, jansson, PCRE2, ...; never libc
#       or the CUDA libraries, which the image has).
#   bench/gpu_check.sh run             on the GPU machine, from the repo root,
#       with carry/gpu carried: ldd, nvidia-smi, ops_check (every op CUDA vs
#       CPU + attention/GEMM timings), then an end-to-end run of a random tiny
#       checkpoint on cpu and cuda, comparing the saved latents.
#
# With the device tool:  run(command="bash bench/gpu_check.sh run", carry=["carry/gpu"])
# Logs go to $OUT (the device tool's output folder) or /tmp/gpu_check.
set -u -o pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
. bench/carry.sh

pack() {
    local build=${1:-build-cuda}
    carry_build "$build" cuda/lab/ops_check cosmos3 || exit 1
    carry_pack carry/gpu "$build" cuda/lab/ops_check cosmos3 || exit 1
    du -sh carry/gpu/*
}

run() {
    export NCCL_NVLS_ENABLE=0
    local out=${OUT:-/tmp/gpu_check}
    mkdir -p "$out"
    carry_env carry/gpu

    echo "== device"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
    echo "== ldd"
    ldd carry/gpu/ops_check carry/gpu/cosmos3 | grep -E 'not found|libcu|blas|nccl' | sort -u

    echo "== ops_check"
    carry/gpu/ops_check 2>&1 | tee "$out/ops_check.log"
    local rc_ops=$?

    echo "== end to end: random tiny checkpoint, cpu vs cuda"
    local m=/tmp/c3tiny
    carry/gpu/cosmos3 mkmodel --preset tiny --seed 1 -o "$m" --overwrite -q || return 1
    for dev in cpu cuda; do
        local t0=$(date +%s%N)
        COSMOS3_MODEL=$m carry/gpu/cosmos3 gen -p "a red cube on a wooden table" -W 256 -H 256 -s 4 -S 7 \
            --device "$dev" -o "$out/e2e_$dev.png" --save-latents "/tmp/lat_$dev.st" --overwrite -q 2>&1
        echo "$dev: rc $? in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
    done
    python3 - /tmp/lat_cpu.st /tmp/lat_cuda.st <<'PY' 2>&1 | tee "$out/e2e.log"
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        s, e = v['data_offsets']
        dt = {'F32': np.float32, 'F16': np.float16}.get(v['dtype'])
        if dt is None: continue
        out[k] = np.frombuffer(b[8 + n + s:8 + n + e], dtype=dt).astype(np.float64)
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
for k in sorted(a):
    if k in b:
        r = np.linalg.norm(a[k] - b[k]) / max(np.linalg.norm(a[k]), 1e-30)
        print(f"e2e latents {k}: {a[k].size} values, rel L2 cuda vs cpu {r:.3e}")
PY
    return $rc_ops
}

case "${1:-}" in
pack) shift; pack "$@" ;;
run) run ;;
*) sed -n '2,17p' "$0"; exit 2 ;;
esac
