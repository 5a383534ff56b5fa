#!/usr/bin/env bash
# gpu.sh - the GPU machine's checks and timings, one script with named
# sections; one device call runs any list of them.
#
#   bench/gpu.sh pack [BUILD]      here (no GPU): build BUILD (default build-gpu,
#       configured with -Dcuda=enabled and without serve, the TUI and sixel,
#       whose libraries the GPU image lacks; PACK_OPTS adds meson options)
#       and fill carry/gpu/ with the programs
#       and the libraries they load that the GPU image lacks (libcosmos3, OpenBLAS,
#       jansson, ...: bench/carry.sh), debug info stripped,
#       and carry/fixtures.txz with tiny-a (its model and goldens, less the
#       tokenizer, which is share/'s). NO_FIXTURES=1 leaves the fixtures out
#       (then `goldens` skips). NO_OPS=1 leaves ops_check out (2.7 MB). The conditioned goldens (tiny-a/cond) stay out unless
#       WITH_COND=1 FIXTURES_EXCLUDE=' ' (with the demo model in the tree they overrun 64 MiB). The carry must stay under 64 MiB with the tree.
#   bench/gpu.sh SECTION...         there, from the repo root, carry
#       ["carry/gpu", "carry/fixtures.txz"]; logs and JSON to $OUT:
#     check    the device, ldd, ops_check: every backend op CUDA vs CPU (bf16
#              tolerance 1e-2), then the attention/GEMM timings (OPS_QUICK=1: none)
#     goldens  tiny-a goldens on CUDA bf16 and on the fp32 check path
#              (COSMOS3_CUDA_FP32=1), one forward CUDA vs CPU (tiny-a, nano 2 layers)
#     layouts  every layout as ranks sharing GPU 0 vs world 1, --offload vs
#              resident and its H2D rate, the real-geometry VAE (nano 256x256),
#              nano latents CUDA vs CPU after 1 and 2 steps, compute-sanitizer
#     demo     the demo model's 30 judged pictures on CUDA bf16 / fp32 / op by op
#              (COSMOS3_GRAPHS=0) / CPU, the C engine vs bench/demo/demo_train.py's
#              forward, time per picture beside the PyTorch sampler
#     speed    cosmos3 bench, Nano 36 layers: T2I 1024^2 and 480p/93f with the CFG
#              batch and without, 720p/189f; bench/reference/torch_ref.py on the same
#              shapes in the same call; the ratios (BENCHES="t2i 480p" picks,
#              SKIP_TORCH=1 leaves torch out)
#     all      check goldens layouts demo speed (about 8-10 minutes on an H200: if
#              the call limit is 10 minutes, run "check goldens layouts demo" and
#              "speed" as two calls)
#     train    bench/demo/demo_train.py --smoke, then every stage, its check of the
#              C engine (pictures and conditioned clips) and the C engine's judged
#              clips (tests/test_demo_motion) on the new model (not in all: ~9 minutes;
#              TRAIN_ARGS adds trainer options; NO_NANO=1 skips the nano model setup makes)
#
# With the device tool:  run(command="bash bench/gpu.sh all", carry=["carry/gpu", "carry/fixtures.txz"])
# Exit status: the number of failing checks (0: every section passed).
# shellcheck disable=SC2317 # the sections are called as sec_$name
set -u -o pipefail
# GPU_ROOT: the checkout to run in (a copy of this script carried in a
# folder of its own runs from the repo root it names); GPU_PACK: the pack
here=${GPU_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$here" || exit 1
pk=${GPU_PACK:-carry/gpu}
# shellcheck source=bench/carry.sh
. bench/carry.sh
files=(cosmos3 tests/test_model tests/test_vae tests/test_e2e
    tests/test_backends tests/test_gpu_ranks tests/test_demo tests/test_demo_motion tests/libdemojudge.so
    ${WITH_COND:+tests/test_cond tests/test_cond_e2e})
[ -n "${NO_OPS:-}" ] || files+=(cuda/lab/ops_check)
fails=0
out=${OUT:-/tmp/gpu}

pack() {
    local build=${1:-build-gpu}
    local opts=(-Dcuda=enabled -Dserve=disabled -Dtui=disabled -Dsixel=disabled -Dmedia=disabled)
    # shellcheck disable=SC2206 # PACK_OPTS: words
    opts+=(${PACK_OPTS:-})
    if [ -d "$build" ]; then
        meson configure "$build" "${opts[@]}" || exit 1
    else
        meson setup "$build" "${opts[@]}" || exit 1
    fi
    carry_build "$build" "${files[@]}" || exit 1
    carry_pack "$pk" "$build" "${files[@]}" || exit 1
    rm -f carry/fixtures.txz
    if [ -z "${NO_FIXTURES:-}" ]; then
        tar cJf carry/fixtures.txz --exclude=tiny-a/model/text_tokenizer ${FIXTURES_EXCLUDE:---exclude=tiny-a/cond} \
            -C "${COSMOS3_FIXTURES_SRC:-$here/../shared/fixtures}" tiny-a || exit 1
    fi
    du -sh "$pk" carry/fixtures.txz 2>/dev/null
    # what travels: the tree (tracked and untracked-not-ignored files) and the carry
    local tree carried
    tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    carried=$(du -cb "$pk" carry/fixtures.txz 2>/dev/null | tail -1 | cut -f1)
    awk -v t="$tree" -v c="$carried" 'BEGIN {
        printf "travels: tree %.1f MiB + carry %.1f MiB = %.1f MiB (limit 64 MiB)\n", t / 2^20, c / 2^20, (t + c) / 2^20
        if (t + c > 64 * 2^20) { print "gpu.sh pack: over the limit: NO_FIXTURES=1, or fewer files"; exit 1 } }'
}

section() { echo; echo "=== $* ($(date +%T))"; }

# counted NAME RC: one line, and a failure counted unless RC is 0 (or 77: skipped)
counted() {
    echo "$1: rc $2"
    [ "$2" = 0 ] || [ "$2" = 77 ] || fails=$((fails + 1))
}

setup() {
    export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
    mkdir -p "$out"
    carry_env "$pk"
    fx=/tmp/c3fx
    if [ -e carry/fixtures.txz ]; then
        mkdir -p "$fx" && tar -C "$fx" -xJf carry/fixtures.txz &&
            cp -r share/tokenizer "$fx/tiny-a/model/text_tokenizer"
    else
        fx=/nonexistent
    fi
    export COSMOS3_FIXTURES=$fx COSMOS3_BIN=$here/$pk/cosmos3 COSMOS3_SRCDIR=$here
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} OPENBLAS_NUM_THREADS=1
    bin=$pk/cosmos3
    nano=/tmp/c3nano2
    [ -n "${NO_NANO:-}" ] && nano=
    [ -z "$nano" ] || [ -f "$nano/model_index.json" ] ||
        timeout 60 "$bin" mkmodel --preset nano --layers 2 --seed 3 -o "$nano" --overwrite -q || nano=
    export COSMOS3_NANO2=$nano
}

# latents_rel A B TOL LABEL: rel L2 of two --save-latents files, within TOL
latents_rel() {
    python3 - "$@" <<'PY'
import json, struct, sys
import numpy as np
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
    s, e = h['latents']['data_offsets']
    return np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32).astype(np.float64)
a, b = load(sys.argv[1]), load(sys.argv[2])
r = np.linalg.norm(a - b) / np.linalg.norm(a)
tol = float(sys.argv[3])
print(f"{sys.argv[4]}: latents rel L2 cuda vs cpu {r:.3e} (tolerance {tol:.0e})")
sys.exit(0 if r <= tol else 1)
PY
}

sec_check() {
    section "check: device, ldd, ops_check (every op CUDA vs CPU${OPS_QUICK:+; no timings})"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
    echo "commit $(git -C "$here" log -1 --format='%h %s' 2>/dev/null || echo unknown)"
    if ldd "$bin" "$pk/ops_check" 2>/dev/null | grep -E 'not found'; then
        counted "ldd" 1
        return
    fi
    if [ ! -x "$pk/ops_check" ]; then
        echo "ops_check not carried (NO_OPS=1 at pack): skipped"
        return
    fi
    timeout 300 "$pk/ops_check" ${OPS_QUICK:+--quick} 2>&1 | grep -v -E '^\s*$' | tee "$out/ops_check.log" | tail -90
    counted "ops_check" "${PIPESTATUS[0]}"
}

sec_goldens() {
    section "goldens: tiny-a on CUDA bf16 (one forward <= 2e-2, six steps <= 6e-2) and fp32 (<= 1e-4)"
    local t rc
    for t in model vae e2e ${WITH_COND:+cond cond_e2e}; do
        COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_$t" >"$out/test_${t}_bf16.txt" 2>&1
        rc=$?
        grep -v -E '^  (trace|ok)' "$out/test_${t}_bf16.txt" | tail -12
        counted "test_$t (cuda bf16)" "$rc"
        COSMOS3_CUDA_FP32=1 COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_$t" >"$out/test_${t}_fp32.txt" 2>&1
        rc=$?
        grep -v -E '^  (trace|ok)' "$out/test_${t}_fp32.txt" | tail -12
        counted "test_$t (cuda fp32)" "$rc"
    done
    section "goldens: one forward, CUDA (bf16) vs the CPU backend (fp32): tiny-a and nano 2 layers (<= 2e-2)"
    timeout 200 "$pk/test_backends" 2>&1 | tail -8
    counted "test_backends" "${PIPESTATUS[0]}"
}

sec_layouts() {
    section "layouts: every layout as ranks sharing GPU 0, offload vs resident, nano H2D rate"
    timeout 200 "$pk/test_gpu_ranks" 2>&1 | tee "$out/test_gpu_ranks.txt" | tail -45
    counted "test_gpu_ranks" "${PIPESTATUS[0]}"
    if [ -n "$nano" ]; then
        section "layouts: real-geometry VAE on the GPU (1024-channel mid-block attention): nano, 256x256"
        timeout 90 "$bin" gen -m "$nano" -p "a red cube on a wooden table" -W 256 -H 256 -s 2 -S 7 --device cuda \
            -o "$out/nano256.png" --overwrite --json 2>&1 | tail -3
        counted "nano gen 256x256" "${PIPESTATUS[0]}"
        section "layouts: nano 2 layers, CUDA (bf16) vs CPU (fp32): latents after 1 and 2 CFG steps, 128x128"
        local steps dev
        for steps in 1 2; do
            for dev in cpu cuda; do
                timeout 120 "$bin" gen -m "$nano" -p "a red cube on a wooden table" -W 128 -H 128 -s "$steps" -S 9 \
                    --device "$dev" --save-latents "/tmp/nano_${dev}_$steps.st" -o "/tmp/nano_${dev}_$steps.png" \
                    --overwrite -q || counted "nano $dev $steps steps" 1
            done
            # the sampler output (x - sigma v cancels): 6e-2; the one-forward bound is in goldens
            latents_rel "/tmp/nano_cpu_$steps.st" "/tmp/nano_cuda_$steps.st" 6e-2 "nano, $steps step(s)"
            counted "nano latents, $steps step(s)" $?
        done
    fi
    section "layouts: compute-sanitizer memcheck: tiny, tp 2 x cfg 2 on GPU 0, --offload"
    local cs=/usr/local/cuda/bin/compute-sanitizer
    [ -x "$cs" ] || cs=$(command -v compute-sanitizer || true)
    if [ -n "$cs" ] && [ -x "$cs" ]; then
        local tiny=/tmp/c3tiny8
        "$bin" mkmodel --preset tiny --layers 2 --seed 5 -o "$tiny" --overwrite -q
        timeout 120 "$cs" --tool memcheck --leak-check no --error-exitcode 9 "$bin" gen -m "$tiny" \
            -p "a red cube on a wooden table" -W 80 -H 48 -s 2 -S 7 --device cuda --gpus 0,0,0,0 --tp 2 \
            --cfg-parallel 2 --offload -o /tmp/cs.png --overwrite -q 2>&1 | tail -n 6
        counted "memcheck" "${PIPESTATUS[0]}"
    else
        echo "compute-sanitizer not found: memcheck skipped"
    fi
}

sec_demo() {
    section "demo: the CI test's 30 held-out pictures, C engine: CUDA bf16, fp32 check path, op by op, CPU"
    local w=/tmp/demo_check v
    mkdir -p "$w"
    COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_demo" >"$out/verdicts_cuda.txt"
    counted "test_demo cuda" $?
    COSMOS3_CUDA_FP32=1 COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_demo" >"$out/verdicts_cuda_fp32.txt"
    counted "test_demo cuda fp32" $?
    COSMOS3_GRAPHS=0 COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_demo" >"$out/verdicts_cuda_nographs.txt"
    counted "test_demo cuda, no graphs" $?
    COSMOS3_TEST_DEVICE=cpu timeout 200 "$pk/test_demo" >"$out/verdicts_cpu.txt"
    counted "test_demo cpu" $?
    if cmp -s "$out/verdicts_cuda.txt" "$out/verdicts_cuda_nographs.txt"; then
        echo "CUDA graphs (GEN loop, VAE decode) vs op by op: the same 30 pictures, pixel for pixel"
    else
        diff "$out/verdicts_cuda.txt" "$out/verdicts_cuda_nographs.txt"
        counted "graphs vs op by op" 1
    fi
    for v in cuda cuda_fp32; do
        python3 - "$out/verdicts_$v.txt" "$out/verdicts_cpu.txt" "$v" <<'PY'
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
        counted "asked verdicts $v vs cpu" $?
    done
    section "demo: C engine vs the training script's forward (fp32, TF32 off) on the shipped weights"
    local t="python3 bench/demo/demo_train.py --work $w --cosmos3 $bin --judge $pk/libdemojudge.so --ckpt share/models/demo"
    # shellcheck disable=SC2086 # $t is a command line
    timeout 200 $t check --c-devices cpu,cuda --json-out "$out/demo_check.json"
    counted "demo_train.py check" $?
    section "demo: time per 64x64 picture (20 steps, CFG, VAE, PNG), model loaded; load time"
    # shellcheck disable=SC2086
    timeout 120 $t bench --bench-reps 20 --json-out "$out/demo_bench_torch.json"
    counted "demo_train.py bench" $?
    local d
    for d in cuda cpu; do
        for _ in 1 2 3; do
            /usr/bin/time -f "  $d: whole command %e s" "$bin" gen -p "a red circle on a blue background" \
                --device "$d" -o "$w/t.png" --overwrite -q --json | python3 -c \
                "import json,sys; j=json.load(sys.stdin)['seconds']; print('  gen --json:', {k: round(v, 4) for k, v in j.items()})"
        done
    done
}

# bench NAME ARGS...: cosmos3 bench --json into $out/NAME.json, one summary line
bench() {
    local name=$1
    shift
    "$bin" bench --preset nano --skip-vae --json -q "$@" >"$out/$name.json" || { counted "bench $name" 1; return 1; }
    python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
b = d["breakdown"]
print(f"{sys.argv[2]:14s} S {d['gen_tokens']:6d} batch {str(d.get('cfg_batch')):5s}: step {d['step_ms']:9.2f} ms "
      f"(min {d['step_ms_min']:.2f}) MFU {d['mfu']:.3f} | profiled: matmul {b['matmul_ms']:.1f} ms "
      f"({b['matmul_tflops']:.0f} TF/s), attention {b['attention_ms']:.1f} ms ({b['attention_tflops']:.0f} TF/s), "
      f"rest {b['total_ms'] - b['matmul_ms'] - b['attention_ms']:.1f} ms")
dv = d.get("device_ops")
if dv:
    ops = ", ".join(f"{k} {v['ms']:.2f} ({v['calls']})" for k, v in dv["ops"].items())
    print(f"{'':14s} device time by op (ms, calls): wall {dv['wall_ms']:.2f}, first op to last {dv['span_ms']:.2f}: {ops}")
PY
}

sec_speed() {
    section "speed: cosmos3 bench, Nano 36 layers: one CFG batch vs the branches one by one"
    local want=" ${BENCHES:-t2i t2i_nobatch 480p 480p_nobatch 720p} "
    [[ $want == *" t2i "* ]] && bench t2i -W 1024 -H 1024 --steps 10
    [[ $want == *" t2i_nobatch "* ]] && COSMOS3_CFG_BATCH=0 bench t2i_nobatch -W 1024 -H 1024 --steps 10
    [[ $want == *" 480p "* ]] && bench 480p -W 832 -H 480 -F 93 --steps 3
    [[ $want == *" 480p_nobatch "* ]] && COSMOS3_CFG_BATCH=0 bench 480p_nobatch -W 832 -H 480 -F 93 --steps 3
    [[ $want == *" 720p "* ]] && bench 720p -W 1280 -H 720 -F 189 --steps 1
    if [ -z "${SKIP_TORCH:-}" ] && [ -f "$out/t2i.json" ]; then
        section "speed: bench/reference/torch_ref.py bench, same shapes, same call"
        python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())'
        local lc lu
        lc=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["L_cond"])' "$out/t2i.json")
        lu=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["L_uncond"])' "$out/t2i.json")
        timeout 200 python3 bench/reference/torch_ref.py bench --sizes t2i,480p --lc "$lc" --lu "$lu" \
            --attn-s 1024,9360,44160 --json-out "$out/torch.json" | grep -E "torch CFG step|cuDNN SDPA"
        timeout 90 python3 bench/reference/torch_ref.py bench --layers 4 --sizes 720p --lc "$lc" --lu "$lu" --reps 2 \
            --attn-s 44160 --json-out "$out/torch_720p_l4.json" | grep -E "torch CFG step"
    fi
    section "speed: ours / torch_ref time; targets of issue 7 item 1"
    python3 - "$out" <<'PY'
import json, os, sys
d = sys.argv[1]
ld = lambda n: json.load(open(os.path.join(d, n))) if os.path.exists(os.path.join(d, n)) else None
t, t7 = ld("torch.json"), ld("torch_720p_l4.json")
target = {"t2i": 45.0, "480p": 500.0, "720p": 4600.0}
for name in ("t2i", "480p", "720p"):
    o, nb = ld(name + ".json"), ld(name + "_nobatch.json")
    if not o:
        continue
    if name == "720p":
        r = t7["sizes"]["720p"]["step_s"] * 1e3 * 9 if t7 else None
    else:
        r = t["sizes"][name]["step_s"] * 1e3 if t and name in t["sizes"] else None
    line = f"{name:5s}: ours {o['step_ms']:8.2f} ms MFU {o['mfu']:.3f}"
    if nb:
        line += f" | without the batch {nb['step_ms']:8.2f} ms (batch x{nb['step_ms'] / o['step_ms']:.3f})"
    if r:
        line += f" | torch_ref {r:8.2f} ms{' (4 layers x 9)' if name == '720p' else ''} | ours/torch {o['step_ms'] / r:.3f}"
    line += f" | target {target[name]:.0f} ms: {'met' if o['step_ms'] <= target[name] else 'not met'}"
    print(line)
PY
}

# What comes back from a device call is at most 8 files of at most 16 MiB
# each: train writes six to $out (gpu.log, scores.json, the shipped
# transformer and VAE safetensors, ship-meta.tgz with the configs, and
# train-logs.tgz with every other log); the rest stays in /tmp/demo_work.
sec_train() {
    local w=/tmp/demo_work
    rm -rf "$w/logs" && mkdir -p "$w/logs"
    train_run "$w" "$w/logs"
    tar czf "$out/train-logs.tgz" -C "$w" logs
}

train_run() {
    section "train: bench/demo/demo_train.py --smoke (every stage, a few steps), then every stage, the C engine's check and its judged clips"
    local w=$1 lg=$2 sm=/tmp/demo_smoke
    # TRAIN_PY: the trainer to run (a carried copy; torch_ref.py beside it in ../reference)
    local py=${TRAIN_PY:-bench/demo/demo_train.py}
    local t="python3 $py --cosmos3 $bin --judge $pk/libdemojudge.so"
    mkdir -p "$w" "$sm"
    local t0
    t0=$(date +%s)
    $t all --smoke --work "$sm" --to "$sm/ship" >"$lg/smoke.log" 2>&1 &&
        $t check --smoke --work "$sm" --ckpt "$sm/ship" --c-devices cpu >>"$lg/smoke.log" 2>&1
    local rc=$?
    tail -4 "$lg/smoke.log"
    counted "train smoke ($(( $(date +%s) - t0 )) s)" $rc
    [ $rc = 0 ] || { tail -40 "$lg/smoke.log"; return; }
    t0=$(date +%s)
    # one process for vae, dit, score and pack (TRAIN_ARGS: trainer options)
    # shellcheck disable=SC2086 # the *_ARGS are words
    $t all --work "$w" --to "$w/ship" ${TRAIN_ARGS:-} || { counted "train" 1; return; }
    echo "vae + dit + score + pack: $(( $(date +%s) - t0 )) s"
    cp "$w/scores.json" "$out/"
    cp "$w/ship/transformer/diffusion_pytorch_model.safetensors" "$out/ship-transformer.safetensors"
    cp "$w/ship/vae/diffusion_pytorch_model.safetensors" "$out/ship-vae.safetensors"
    tar czf "$out/ship-meta.tgz" -C "$w" ship/model_index.json ship/transformer/config.json ship/vae/config.json \
        ship/scheduler
    python3 - "$w" "$lg/train_meta.json" <<'PY'
import json, sys, torch
w = sys.argv[1]
v, d = torch.load(w + "/vae.pt"), torch.load(w + "/dit.pt")
json.dump(dict(vae=dict(steps=v["steps"], seconds=v["seconds"], psnr=v["psnr"], judged=v["judged"],
                        psnr_clips=v.get("psnr_clips"), judged_clips=v.get("judged_clips"), log=v["log"]),
               dit=dict(steps=d["steps"], seconds=d["seconds"], log=d["log"])), open(sys.argv[2], "w"), indent=1)
PY
    $t check --work "$w" --ckpt "$w/ship" --c-devices cpu,cuda --json-out "$lg/check.json"
    counted "train check (C engine vs the trainer's forward)" $?
    # the C engine's clips and pictures from the new model, judged (PNG frames: no FFmpeg here)
    COSMOS3_DEMO_MODEL=$w/ship COSMOS3_TEST_DEVICE=cuda "$pk/test_demo_motion" >"$lg/motion_cuda.txt"
    counted "demo_motion cuda" $?
    COSMOS3_DEMO_MODEL=$w/ship "$pk/test_demo_motion" >"$lg/motion_cpu.txt"
    counted "demo_motion cpu" $?
    COSMOS3_DEMO_MODEL=$w/ship "$pk/test_demo" >"$lg/demo_cpu.txt"
    counted "demo cpu (T2I)" $?
}

usage() { sed -n '2,36p' "$0"; exit 2; }

[ $# -ge 1 ] || usage
case "$1" in
pack) shift; pack "$@"; exit ;;
esac
# every argument names a section: check them all before any work
sections=()
for s in "$@"; do
    case "$s" in
    check | goldens | layouts | demo | speed | train) sections+=("$s") ;;
    all) sections+=(check goldens layouts demo speed) ;;
    *) echo "gpu.sh: unknown section '$s'" >&2; usage ;;
    esac
done
[ -d "$pk" ] || { echo "gpu.sh: $pk is missing: run 'bash bench/gpu.sh pack' here and carry it" >&2; exit 2; }
mkdir -p "$out"
exec > >(tee "$out/gpu.log") 2>&1
setup
t0=$(date +%s)
for s in "${sections[@]}"; do
    "sec_$s"
done
section "done: ${sections[*]} in $(( $(date +%s) - t0 )) s; $fails failing check(s)"
exit "$fails"
