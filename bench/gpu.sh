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
#       tokenizer, which is share/'s; the embedding sparse and lm_head out:
#       bench/fixtures_stage.py). SERVE=1 builds cosmos3 serve too (section `serve`;
#       its libraries, libmicrohttpd, GnuTLS and SQLite, travel: +2.5 MiB as xz; with the
#       fixtures and ops_check the carry is then 63.5 MiB with the tree: NO_OPS=1 for room).
#       NO_FIXTURES=1 leaves the fixtures out
#       (then `goldens` skips). NO_OPS=1 leaves ops_check and vae_lab out. The conditioned goldens (tiny-a/cond) stay out unless
#       WITH_COND=1 FIXTURES_EXCLUDE=' ' (with the demo model in the tree they overrun 64 MiB). The carry must stay under 64 MiB with the tree.
#   bench/gpu.sh SECTION...         there, from the repo root, carry
#       ["carry/gpu", "carry/fixtures.txz"]; logs and JSON to $OUT:
#     check    the device, ldd, ops_check: every backend op CUDA vs CPU (bf16
#              tolerance 1e-2), then the attention/GEMM timings (OPS_QUICK=1: none)
#     goldens  tiny-a goldens on CUDA bf16 and on the fp32 check path
#              (COSMOS3_CUDA_FP32=1), batched requests vs each alone (test_batch),
#              one forward CUDA vs CPU (tiny-a, nano 2 layers)
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
#     cond     (pack with WITH_COND=1) test_cond and test_cond_e2e on CUDA bf16 and
#              fp32; the i2v case with --offload, --cfg-parallel 2 and --ulysses 2
#              (ranks sharing GPU 0) vs world 1; an i2v run at 832x480/93f on the
#              Nano geometry (2 layers) beside the same t2v run (the encode's time)
#     fp8      ops_check --fp8 (FP8 linear CUDA vs CPU, FP8 GEMM timings); one
#              forward FP8 CUDA vs CPU (test_backends, nano 2 layers); a tiny
#              mkmodel --fp8 checkpoint CUDA vs CPU, --offload and --tp 2 vs world
#              1; Nano-2L --precision fp8 vs bf16 (1 and 20 steps, guidance 1 and
#              CFG, CUDA and CPU; activation scales per call and calibrated on the
#              first step: COSMOS3_FP8_CALIBRATE=1); the demo model in FP8 judged
#     regress  cosmos3 bench T2I 1024^2 and 480p/93f CFG step against the
#              numbers before issue 18 (47.3 ms, 578 ms): within 5 %
#     vae      the VAE decode: vae_lab (each conv variant vs a float32
#              reference, timed), test_vae on CUDA bf16 (channels-last; the
#              full Wan2.2 VAE bf16 vs fp32) and fp32, the generic bf16 path
#              (COSMOS3_VAE_CL=0), `cosmos3 bench --preset nano` decode at
#              1024^2, 480p/93f, 720p/189f (cold and warm) beside
#              bench/reference/vae_ref.py (torch_ref.py's decoder, bf16) on the same
#              VAE in the same call; test_vae also decodes the VAE_PROFILE latent sizes
#              ("T,h,w;...", default 1024^2, 480p, 720p) cold, warm and op by op
#              (VAE_SIZES="WxHxF ..." picks the bench sizes, SKIP_TORCH=1 leaves torch out)
#
# Overrides (for a copy run from a carried folder, e.g. .gpu-NAME/gpu.sh with
# bench/carry.sh beside it): GPU_PACK (default carry/gpu), GPU_FX (default
# carry/fixtures.txz). The repo root is the folder above the script's.
#
# With the device tool:  run(command="bash bench/gpu.sh all", carry=["carry/gpu", "carry/fixtures.txz"])
# Exit status: the number of failing checks (0: every section passed).
# shellcheck disable=SC2317 # the sections are called as sec_$name
set -u -o pipefail
# GPU_ROOT: the checkout to run in (a copy of this script carried in a
# folder of its own runs from the repo root it names); GPU_PACK: the pack
sdir=$(cd "$(dirname "$0")" && pwd)
here=${GPU_ROOT:-$(cd "$sdir/.." && pwd)}
cd "$here" || exit 1
pk=${GPU_PACK:-carry/gpu}
fxa=${GPU_FX:-carry/fixtures.txz}
# shellcheck source=bench/carry.sh
if [ -f "$sdir/carry.sh" ]; then . "$sdir/carry.sh"; else . bench/carry.sh; fi
# libcosmos3-cuda.so: the CUDA backend, a module libcosmos3 opens; found
# beside the programs in the pack (src/cuda_module.c looks beside the program)
files=(cosmos3 libcosmos3-cuda.so tests/test_model tests/test_vae tests/test_e2e
    tests/test_backends tests/test_gpu_ranks tests/test_demo tests/test_demo_motion tests/libdemojudge.so tests/test_batch
    ${WITH_COND:+tests/test_cond tests/test_cond_e2e})
[ -n "${NO_OPS:-}" ] || files+=(tests/ops_check cuda/lab/vae_lab)
fails=0
out=${OUT:-/tmp/gpu}

pack() {
    local build=${1:-build-gpu}
    local opts=(-Dcuda=enabled -Dserve=disabled -Dtui=disabled -Dsixel=disabled -Dmedia=disabled)
    # SERVE=1: cosmos3 serve too (libmicrohttpd with GnuTLS, SQLite: ldd carries them) for `serve`
    [ -n "${SERVE:-}" ] && opts+=(-Dserve=enabled)
    # shellcheck disable=SC2206 # PACK_OPTS: words
    opts+=(${PACK_OPTS:-})
    if [ -d "$build" ]; then
        meson configure "$build" "${opts[@]}" || exit 1
    else
        meson setup "$build" "${opts[@]}" || exit 1
    fi
    carry_build "$build" "${files[@]}" || exit 1
    carry_pack "$pk" "$build" "${files[@]}" || exit 1
    rm -f "$fxa"
    if [ -z "${NO_FIXTURES:-}" ]; then
        # tiny-a as bench/fixtures_stage.py stages it: its embedding sparse (the
        # goldens' ids), lm_head out: 22 -> ~4 MiB, the goldens' numbers unchanged
        local stage
        stage=$(mktemp -d) || exit 1
        cp -r "${COSMOS3_FIXTURES_SRC:-$here/../shared/fixtures}/tiny-a" "$stage/" && chmod -R u+w "$stage" &&
            rm -rf "$stage/tiny-a/model/text_tokenizer" || exit 1
        cp -r share/tokenizer "$stage/tiny-a/model/text_tokenizer" &&
            python3 "$sdir/fixtures_stage.py" "$stage/tiny-a" "$build/cosmos3" &&
            rm -rf "$stage/tiny-a/model/text_tokenizer" || exit 1
        mkdir -p "$(dirname "$fxa")"
        # shellcheck disable=SC2086 # FIXTURES_EXCLUDE: words
        tar cJf "$fxa" ${FIXTURES_EXCLUDE:---exclude=tiny-a/cond} -C "$stage" tiny-a || exit 1
        rm -rf "$stage"
    fi
    du -sh "$pk" "$fxa" 2>/dev/null
    # what travels: the tree (tracked and untracked-not-ignored files) and the carry
    local tree carried
    tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    carried=$(du -cb "$pk" "$fxa" 2>/dev/null | tail -1 | cut -f1)
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
    if [ -e "$fxa" ]; then
        mkdir -p "$fx" && tar -C "$fx" -xJf "$fxa" &&
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
print(f"{sys.argv[4]}: latents rel L2 {r:.3e} (tolerance {tol:.0e})")
sys.exit(0 if r <= tol else 1)
PY
}

sec_check() {
    section "check: device, ldd, ops_check (every op CUDA vs CPU${OPS_QUICK:+; no timings})"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
    echo "commit $(git -C "$here" log -1 --format='%h %s' 2>/dev/null || echo unknown)"
    if ldd "$bin" "$pk/libcosmos3-cuda.so" "$pk/ops_check" 2>/dev/null | grep -E 'not found'; then
        counted "ldd" 1
        return
    fi
    # the program opens the CUDA module beside it and sees the GPUs
    local dline
    dline=$("$bin" info -m share/models/demo 2>&1 | grep -m1 '^device')
    echo "cosmos3 info: $dline"
    case "$dline" in *"no usable GPU"*) counted "the CUDA module" 1 ;; esac
    if [ ! -x "$pk/ops_check" ]; then
        echo "ops_check not carried (NO_OPS=1 at pack): skipped"
        return
    fi
    timeout 300 "$pk/ops_check" ${OPS_QUICK:+--quick} 2>&1 | grep -v -E '^\s*$' | tee "$out/ops_check.log" | tail -90
    counted "ops_check" "${PIPESTATUS[0]}"
}

# cuda_pair NAME SECONDS LINES: tests/test_NAME on CUDA bf16 and on the fp32
# check path, each log to $out, its last LINES lines (less trace/ok) shown
cuda_pair() {
    local t=$1 rc fp
    for fp in "" 1; do
        local tag=bf16
        [ -n "$fp" ] && tag=fp32
        COSMOS3_CUDA_FP32=$fp COSMOS3_TEST_DEVICE=cuda timeout "$2" "$pk/test_$t" >"$out/test_${t}_$tag.txt" 2>&1
        rc=$?
        grep -v -E '^  (trace|ok)' "$out/test_${t}_$tag.txt" | tail -"$3"
        counted "test_$t (cuda $tag)" "$rc"
    done
}

sec_goldens() {
    section "goldens: tiny-a on CUDA bf16 (one forward <= 2e-2, six steps <= 6e-2) and fp32 (<= 1e-4)"
    local t rc
    for t in model vae e2e; do cuda_pair "$t" 120 12; done
    section "goldens: batched vs alone on CUDA (test_batch: the demo model and tiny, every layout as ranks sharing GPU 0; bf16 <= 6e-2)"
    cuda_pair batch 240 6
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
            latents_rel "/tmp/nano_cpu_$steps.st" "/tmp/nano_cuda_$steps.st" 6e-2 "nano, $steps step(s), cuda vs cpu"
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

# secs FILE.json...: the phases of gen --json runs, one line each
secs() {
    python3 - "$@" <<'PY'
import json, sys
for p in sys.argv[1:]:
    try:
        s = json.load(open(p))["seconds"]
    except Exception as e:
        print(f"  {p}: no result ({e})"); continue
    rest = s["total"] - sum(s[k] for k in ("tokenize", "und", "denoise", "vae", "write"))
    print(f"  {p.rsplit('/', 1)[-1]:22s} total {s['total']:7.3f} s: tokenize {s['tokenize']:.3f} und {s['und']:.3f} "
          f"denoise {s['denoise']:.3f} (step {s['step_mean'] * 1e3:.1f} ms) vae {s['vae']:.3f} write {s['write']:.3f} "
          f"other (load, encode) {rest:.3f}")
PY
}

sec_cond() {
    section "cond: tiny-a/cond goldens on CUDA bf16 and on the fp32 check path"
    local t rc
    if [ ! -x "$pk/test_cond" ] || [ ! -d "$fx/tiny-a/cond" ]; then
        echo "test_cond or tiny-a/cond not carried (pack with WITH_COND=1 FIXTURES_EXCLUDE=' '): skipped"
        return
    fi
    for t in cond cond_e2e; do cuda_pair "$t" 150 14; done
    section "cond: one i2v case (tiny-a, 64x64, 9 frames, 4 steps): --offload, --cfg-parallel 2, --ulysses 2 vs world 1"
    local m=$fx/tiny-a/model pic=$fx/tiny-a/cond/inputs/i2v_picture_96x72.png w=/tmp/c3cond lay
    mkdir -p "$w"
    local a=(-m "$m" -p "a red cube on a wooden table" --image "$pic" -W 64 -H 64 -F 9 -s 4 -S 3 --device cuda)
    timeout 60 "$bin" gen "${a[@]}" --save-latents "$w/one.st" -o "$w/one" --overwrite -q
    counted "i2v world 1" $?
    for lay in offload cfg ulysses; do
        local extra=()
        case $lay in
        offload) extra=(--offload) ;;
        cfg) extra=(--gpus "0,0" --cfg-parallel 2) ;;
        ulysses) extra=(--gpus "0,0" --ulysses 2) ;;
        esac
        timeout 60 "$bin" gen "${a[@]}" "${extra[@]}" --save-latents "$w/$lay.st" -o "$w/$lay" --overwrite -q ||
            { counted "i2v $lay" 1; continue; }
        latents_rel "$w/one.st" "$w/$lay.st" 1e-2 "i2v ${extra[*]} vs world 1"
        counted "i2v $lay vs world 1" $?
    done
    if [ -n "$nano" ]; then
        section "cond: i2v vs t2v at 832x480, 93 frames, Nano geometry (2 layers, real VAE), 2 steps: the encode's time"
        local b=(-m "$nano" -p "a red cube on a wooden table" -W 832 -H 480 -F 93 -s 2 -S 3 --device cuda)
        timeout 150 "$bin" gen "${b[@]}" -o "$w/t2v480" --overwrite -q --json >"$w/t2v480.json"
        counted "t2v 480p/93f" $?
        timeout 150 "$bin" gen "${b[@]}" --image "$pic" -o "$w/i2v480" --overwrite -q --json >"$w/i2v480.json"
        counted "i2v 480p/93f" $?
        secs "$w/t2v480.json" "$w/i2v480.json"
        python3 - "$w/t2v480.json" "$w/i2v480.json" <<'PY'
import json, sys
try:
    t, i = (json.load(open(p))["seconds"] for p in sys.argv[1:3])
    print(f"  encode (i2v total - t2v total) {i['total'] - t['total']:.3f} s; a Nano-2L CFG step "
          f"{i['step_mean'] * 1e3:.1f} ms (36 layers: x18 ~ {i['step_mean'] * 18:.2f} s)")
except Exception as e:
    print(f"  no comparison ({e})")
PY
        cp "$w"/*.json "$out/" 2>/dev/null
    fi
}

# benchj NAME ARGS...: cosmos3 bench --json (any preset) into $out/NAME.json
benchj() {
    local name=$1
    shift
    timeout 200 "$bin" bench --json -q "$@" >"$out/$name.json" 2>"$out/$name.err" ||
        { tail -3 "$out/$name.err"; counted "bench $name" 1; return 1; }
    # the numbers into the log too (only a few files come back from a device call)
    python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
o = d["outside_loop"]
print(f"  {sys.argv[2]}: step {d['step_ms']:.2f} ms (cond {d['cond_ms']:.2f}, uncond {d['uncond_ms']:.2f}), "
      f"MFU {d['mfu']:.3f}, load {o['load_s']:.2f} s, UND cond {o['und_cond_ms']:.2f} ms (first call) "
      f"uncond {o['und_uncond_ms']:.2f} ms, VAE {o.get('vae_decode_ms', 0):.1f} ms, PNG {o.get('png_ms', 0):.1f} ms, "
      f"weights {d['memory']['weights_bytes'] / 2**30:.2f} GiB")
PY
}

sec_fp8() {
    local rc
    section "fp8: ops_check --fp8 (FP8 linear CUDA vs the CPU reference, rel L2 <= 1e-2; FP8 GEMM timings)"
    if [ -x "$pk/ops_check" ]; then
        timeout 240 "$pk/ops_check" --fp8 >"$out/ops_check_fp8.log" 2>&1
        rc=$?
        grep -E 'fp8|FP8|checks|W8A16' "$out/ops_check_fp8.log"
        counted "ops_check --fp8" "$rc"
    else
        echo "ops_check not carried (NO_OPS=1): skipped"
    fi
    section "fp8: one forward, FP8 CUDA vs the FP8 CPU reference, and FP8 vs 16-bit (test_backends; nano 2 layers)"
    timeout 300 "$pk/test_backends" 2>&1 | tail -8
    counted "test_backends (bf16 and fp8)" "${PIPESTATUS[0]}"

    section "fp8: tiny mkmodel --fp8 (policy: W8A8 middle steps), 8 steps 64x64: CUDA vs CPU"
    local t=/tmp/c3f8 p d s
    mkdir -p "$t"
    "$bin" mkmodel --preset tiny --fp8 --seed 5 -o "$t/f8" --overwrite -q || counted "mkmodel --fp8" 1
    g8() { # model precision device steps tag W H [extra...]
        local mm=$1 pr=$2 dv=$3 st=$4 tag=$5 W=$6 H=$7
        shift 7
        timeout 120 "$bin" gen -m "$mm" --precision "$pr" --device "$dv" -p "a red cube on a wooden table" -W "$W" \
            -H "$H" --steps "$st" --seed 3 "$@" --save-latents "$t/$tag.st" -o "$t/$tag.png" --overwrite -q ||
            counted "gen $tag" 1
    }
    for p in auto bf16; do
        for d in cuda cpu; do g8 "$t/f8" "$p" "$d" 8 "f8_${p}_$d" 64 64; done
    done
    latents_rel "$t/f8_auto_cpu.st" "$t/f8_auto_cuda.st" 6e-2 "tiny fp8 (as stored) cuda vs cpu"
    counted "tiny fp8 cuda vs cpu" $?
    latents_rel "$t/f8_bf16_cpu.st" "$t/f8_bf16_cuda.st" 6e-2 "tiny fp8 --precision bf16 cuda vs cpu (the bf16 baseline)"
    counted "tiny bf16 cuda vs cpu" $?
    latents_rel "$t/f8_bf16_cpu.st" "$t/f8_auto_cpu.st" 1 "tiny: fp8 policy vs bf16, cpu (measured)"
    latents_rel "$t/f8_bf16_cuda.st" "$t/f8_auto_cuda.st" 1 "tiny: fp8 policy vs bf16, cuda (measured)"
    # offload: each layer's slot must carry that layer's scales (not the first layer's)
    g8 "$t/f8" auto cuda 8 f8_auto_cuda_off 64 64 --offload
    latents_rel "$t/f8_auto_cuda.st" "$t/f8_auto_cuda_off.st" 1e-5 "tiny fp8 cuda --offload vs resident"
    counted "tiny fp8 offload vs resident" $?
    g8 "$t/f8" auto cuda 8 f8_auto_cuda_tp2 64 64 --gpus 0,0 --tp 2
    latents_rel "$t/f8_auto_cuda.st" "$t/f8_auto_cuda_tp2.st" 6e-2 "tiny fp8 cuda --tp 2 (GPU 0 twice) vs world 1"
    counted "tiny fp8 tp 2 vs world 1" $?

    if [ -n "$nano" ]; then
        section "fp8: Nano geometry 2 layers, 256x256: --precision fp8 vs bf16, CUDA and CPU; guidance 1 (no CFG) and the default CFG"
        for d in cuda cpu; do
            g8 "$nano" auto "$d" 1 "n2_b16_${d}_1" 256 256
            g8 "$nano" fp8 "$d" 1 "n2_f8_${d}_1" 256 256
            latents_rel "$t/n2_b16_${d}_1.st" "$t/n2_f8_${d}_1.st" 1 "nano-2L 1 step CFG: fp8 vs bf16 on $d (measured)"
        done
        latents_rel "$t/n2_f8_cpu_1.st" "$t/n2_f8_cuda_1.st" 1 "nano-2L 1 step CFG: fp8 cuda vs fp8 cpu (measured)"
        latents_rel "$t/n2_b16_cpu_1.st" "$t/n2_b16_cuda_1.st" 1 "nano-2L 1 step CFG: bf16 cuda vs cpu fp32 (measured)"
        g8 "$nano" auto cuda 20 n2_b16_cuda_20 256 256
        g8 "$nano" fp8 cuda 20 n2_f8_cuda_20 256 256
        latents_rel "$t/n2_b16_cuda_20.st" "$t/n2_f8_cuda_20.st" 1 "nano-2L 20 steps CFG: fp8 vs bf16 on cuda (measured)"
        for d in cuda cpu; do
            g8 "$nano" auto "$d" 1 "n2_b16_${d}_g1" 256 256 -g 1
            g8 "$nano" fp8 "$d" 1 "n2_f8_${d}_g1" 256 256 -g 1
        done
        latents_rel "$t/n2_b16_cuda_g1.st" "$t/n2_f8_cuda_g1.st" 1 "nano-2L 1 step, guidance 1: fp8 vs bf16 cuda (measured)"
        latents_rel "$t/n2_b16_cpu_g1.st" "$t/n2_f8_cpu_g1.st" 1 "nano-2L 1 step, guidance 1: fp8 vs bf16 cpu (measured)"
        latents_rel "$t/n2_f8_cpu_g1.st" "$t/n2_f8_cuda_g1.st" 1 "nano-2L 1 step, guidance 1: fp8 cuda vs fp8 cpu (measured)"
        latents_rel "$t/n2_b16_cpu_g1.st" "$t/n2_b16_cuda_g1.st" 1 "nano-2L 1 step, guidance 1: bf16 cuda vs cpu (measured)"
        g8 "$nano" fp8 cuda 1 n2_f8_cuda_1_off 256 256 --offload
        latents_rel "$t/n2_f8_cuda_1.st" "$t/n2_f8_cuda_1_off.st" 1e-5 "nano-2L fp8 cuda --offload vs resident"
        counted "nano-2L fp8 offload vs resident" $?
        section "fp8: activation scales calibrated on the first step (COSMOS3_FP8_CALIBRATE=1) vs per call, 20 steps"
        COSMOS3_FP8_CALIBRATE=1 g8 "$nano" fp8 cuda 20 n2_f8c_cuda_20 256 256
        latents_rel "$t/n2_b16_cuda_20.st" "$t/n2_f8c_cuda_20.st" 1 "nano-2L 20 steps: fp8 calibrated vs bf16 on cuda (measured)"
        COSMOS3_FP8_CALIBRATE=1 g8 "$nano" fp8 cuda 1 n2_f8c_cuda_g1 256 256 -g 1
        COSMOS3_FP8_CALIBRATE=1 g8 "$nano" fp8 cpu 1 n2_f8c_cpu_g1 256 256 -g 1
        latents_rel "$t/n2_f8c_cpu_g1.st" "$t/n2_f8c_cuda_g1.st" 1 "nano-2L 1 step, guidance 1: fp8 calibrated cuda vs cpu (measured)"
    fi

    section "fp8: the demo model with --precision fp8 (CUDA), judged, against CUDA bf16"
    COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_demo" >"$out/verdicts_cuda_b16.txt" 2>"$out/demo_b16.err"
    counted "test_demo cuda bf16" $?
    COSMOS3_TEST_PRECISION=fp8 COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_demo" >"$out/verdicts_cuda_fp8.txt" \
        2>"$out/demo_fp8.err"
    counted "test_demo cuda fp8" $?
    tail -n 3 "$out/demo_b16.err" "$out/demo_fp8.err"
    python3 - "$out/verdicts_cuda_fp8.txt" "$out/verdicts_cuda_b16.txt" <<'PY'
import sys
a, b = (open(p).read().splitlines() for p in sys.argv[1:3])
v = lambda l: "|".join(l.split("|")[:3])
same = sum(v(x) == v(y) for x, y in zip(a, b))
print(f"  fp8 vs bf16: {len(a)} pictures, the same verdict on {same}")
for x, y in zip(a, b):
    if v(x) != v(y):
        print(f"    fp8:  {x}\n    bf16: {y}")
PY
}

sec_regress() {
    section "regress: T2I 1024^2 and 480p/93f CFG step against before issue 18 (47.3 ms, 578 ms): within 5 %"
    BENCHES="t2i 480p" SKIP_TORCH=1 sec_speed
    python3 - "$out" <<'PY'
import json, os, sys
bad = 0
for n, before in (("t2i", 47.3), ("480p", 578.0)):
    p = os.path.join(sys.argv[1], n + ".json")
    if not os.path.exists(p):
        print(f"  {n}: no result"); bad += 1; continue
    s = json.load(open(p))["step_ms"]
    print(f"  {n}: now {s:.2f} ms, before {before} ms, ratio {s / before:.3f}")
    bad += s > before * 1.05
sys.exit(bad)
PY
    counted "regress within 5 %" $?
}

sec_vae() {
    section "vae: vae_lab (conv variants vs float32, timed)"
    if [ -x "$pk/vae_lab" ]; then
        timeout 240 "$pk/vae_lab" >"$out/vae_lab.log" 2>&1
        counted "vae_lab" $?
        grep -E '^device|FAIL|^    |convs of|cuBLASLt|old conv|checks' "$out/vae_lab.log"
    else
        echo "vae_lab not carried (NO_OPS=1 at pack): skipped"
    fi
    section "vae: test_vae on CUDA: bf16 channels-last (+ the full Wan2.2 VAE bf16 vs fp32), generic bf16, fp32"
    local rc
    # VAE_PROFILE: latent sizes "T,h,w;..." decoded cold, warm and profiled (op kinds) by test_vae
    COSMOS3_TEST_DEVICE=cuda COSMOS3_TEST_VAE_FULL=/tmp/c3vae COSMOS3_TEST_VAE_PROFILE=${VAE_PROFILE-1,64,64;24,30,52;48,45,80} \
        timeout 240 "$pk/test_vae" >"$out/test_vae_bf16.txt" 2>&1
    rc=$?
    grep -E 'decoded|uint8|full VAE|VAE decode|^  [a-z]|checks|FAIL' "$out/test_vae_bf16.txt" | grep -v '^conv3d' | tail -40
    counted "test_vae (cuda bf16, channels-last)" $rc
    COSMOS3_VAE_CL=0 COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_vae" >"$out/test_vae_generic.txt" 2>&1
    rc=$?
    grep -E 'decoded|uint8|checks|FAIL' "$out/test_vae_generic.txt" | tail -12
    counted "test_vae (cuda bf16, generic)" $rc
    COSMOS3_CUDA_FP32=1 COSMOS3_TEST_DEVICE=cuda timeout 120 "$pk/test_vae" >"$out/test_vae_fp32.txt" 2>&1
    rc=$?
    grep -E 'decoded|uint8|checks|FAIL' "$out/test_vae_fp32.txt" | tail -12
    counted "test_vae (cuda fp32)" $rc
    section "vae: cosmos3 bench --preset nano --layers 1 --steps 1 (the Wan2.2 decode) beside vae_ref.py (bf16)"
    local sz W H F
    # VAE_SIZES: the bench sizes (WxHxF words); SKIP_TORCH=1 leaves vae_ref.py out
    # shellcheck disable=SC2086 # VAE_SIZES: words
    for sz in ${VAE_SIZES-1024x1024x1 832x480x93 1280x720x189}; do
        IFS=x read -r W H F <<<"$sz"
        timeout 200 "$bin" bench --preset nano --layers 1 --steps 1 -W "$W" -H "$H" -F "$F" --json -q \
            >"$out/vae_bench_$sz.json" 2>"$out/vae_bench_$sz.err"
        rc=$?
        counted "bench $sz (vae_decode_ms $(grep -o '"vae_decode_ms": *[0-9.]*' "$out/vae_bench_$sz.json" |
            grep -o '[0-9.]*$'), warm $(grep -o '"vae_decode_warm_ms": *[0-9.]*' "$out/vae_bench_$sz.json" |
            grep -o '[0-9.]*$'))" $rc
    done
    [ -z "${SKIP_TORCH:-}" ] || return 0
    [ -d /tmp/c3vae/vae ] || "$bin" mkmodel --preset nano --layers 1 -o /tmp/c3vae --overwrite -q
    timeout 200 python3 bench/reference/vae_ref.py /tmp/c3vae --reps 2 --json-out "$out/vae_ref.json" 2>&1 |
        tee "$out/vae_ref.log" | tail -6
    counted "vae_ref.py" "${PIPESTATUS[0]}"
}

# More sections live one file each in bench/gpu.d/NAME.sh: each defines sec_NAME
# and opens with comment lines "#     NAME  what it does" that usage prints.
extra=()
for f in "$sdir"/gpu.d/*.sh; do
    [ -f "$f" ] || continue
    # shellcheck disable=SC1090 # the section files
    . "$f"
    extra+=("$(basename "$f" .sh)")
done
usage() {
    sed -n '2,/^# shellcheck disable=SC2317/p' "$0"
    for f in "$sdir"/gpu.d/*.sh; do [ -f "$f" ] && sed -n 's/^#     /#     /p' "$f"; done
    exit 2
}

[ $# -ge 1 ] || usage
case "$1" in
pack) shift; pack "$@"; exit ;;
esac
# every argument names a section: check them all before any work
sections=()
for s in "$@"; do
    case "$s" in
    check | goldens | layouts | demo | speed | train | cond | fp8 | regress | vae) sections+=("$s") ;;
    all) sections+=(check goldens layouts demo speed) ;;
    fp8speed) sections+=(super) ;; # folded into bench/gpu.d/super.sh (session 8)
    *)
        if [[ " ${extra[*]} " == *" $s "* ]]; then
            sections+=("$s")
            continue
        fi
        echo "gpu.sh: unknown section '$s'" >&2; usage ;;
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
