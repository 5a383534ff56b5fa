#!/usr/bin/env bash
# attention_run.sh - the attention lab's one device call (issue 7 item 2).
#   cuda/lab/attention_run.sh pack [BUILD]   here: build the lab (nvcc) and
#       ops_check (BUILD, default build-attn, -Dcuda=enabled) into
#       carry/attn/ with the host libraries ops_check needs.
#   cuda/lab/attention_run.sh run            on the GPU machine (carry
#       carry/attn): SASS instruction counts, the lab (checks + timings of
#       every version), torch SDPA cuDNN/flash on the same shapes, and
#       ops_check --quick (every backend op, CUDA vs CPU; ATTN_OPS_FULL=1 adds
#       its timing tables). Logs under $OUT.
set -u -o pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
. bench/carry.sh

pack() {
    local build=${1:-build-attn}
    carry_build "$build" tests/ops_check || exit 1
    carry_pack carry/attn "$build" tests/ops_check || exit 1
    nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a -Xcompiler=-Wall,-Wextra \
        --Werror all-warnings -o carry/attn/attention_lab cuda/lab/attention_lab.cu || exit 1
    git rev-parse --short HEAD > carry/attn/commit
    git status --short cuda/attention.cu cuda/attention_mma.cuh cuda/attention_hopper.cuh cuda/lab/attention_lab.cu >> carry/attn/commit
    du -sh carry/attn/*
}

run() {
    export NCCL_NVLS_ENABLE=0
    local out=${OUT:-/tmp/attn_out}
    mkdir -p "$out"
    carry_env carry/attn
    echo "== build: $(tr '\n' ' ' < carry/attn/commit)"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
    echo "== SASS (per kernel: HGMMA/QGMMA, HMMA, MUFU.EX2, local memory)"
    if command -v cuobjdump >/dev/null; then
        cuobjdump -sass carry/attn/attention_lab > "$out/lab.sass" 2>&1
        awk '/Function :/{f=$3} /[HQ]GMMA/{g[f]++} /HMMA/{m[f]++} /MUFU.EX2/{e[f]++} /LDL|STL/{l[f]++}
             END{for (k in g) print "  " k, "GMMA", g[k], "MUFU.EX2", e[k]+0, "LDL/STL", l[k]+0;
                 for (k in m) if (!(k in g)) print "  " k, "HMMA", m[k]}' "$out/lab.sass" | sort
        grep -m3 HGMMA "$out/lab.sass"
    else
        echo "  no cuobjdump on this machine"
    fi
    echo "== lab"
    timeout 240 carry/attn/attention_lab 2>&1 | tee "$out/lab.log"
    echo "lab rc $?"
    echo "== torch SDPA"
    PYTHONUNBUFFERED=1 timeout 150 python3 cuda/lab/attention_cudnn.py 2>&1 | tee "$out/cudnn.log"
    # ATTN_OPS_FULL=1: ops_check with its timing tables (the backend entry point)
    local quick=--quick
    [ "${ATTN_OPS_FULL:-0}" = 1 ] && quick=
    echo "== ops_check $quick"
    timeout 180 carry/attn/ops_check $quick > "$out/ops.log" 2>&1
    echo "ops_check rc $?"
    grep -E "attention|flash|failed" "$out/ops.log"
}

case "${1:-}" in
pack) shift; pack "$@" ;;
run) run ;;
*) sed -n '2,10p' "$0"; exit 2 ;;
esac
