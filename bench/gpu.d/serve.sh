# gpu.d/serve.sh - section `serve` of bench/gpu.sh (issue 37 item 5, sourced by gpu.sh).
#     serve    (pack with SERVE=1) issue 37 item 5: bench/load.sh, real HTTP to cosmos3 serve on
#              random weights made on load (mkmodel --random-transformer into /tmp: the VAE
#              written, ~5 s each, no transformer shards), today's settings (--replicas 1
#              --max-batch 1) against the new defaults (--replicas 1 --max-batch 0: batches as
#              large as the memory plan allows, decode beside the next denoise), the same call;
#              the ratio table (throughput, p50, p99) against the targets. SERVE_PARTS picks
#              (default "nano super clips"); device time on an H200, both configurations,
#              loads and warm-ups included:
#                nano   Nano 1024x1024 pictures, 50 steps (~2.4 s each), concurrency 8,
#                       NANO_JOBS=16: ~2 min (target throughput >= 1.3x)
#                super  Super-4Step 1360x768 pictures, 64 layers (~0.7 s each; ~125 GB of bf16
#                       uploaded per server), concurrency 8, SUPER_JOBS=24: ~1.5-3 min (>= 1.4x)
#                clips  Nano 832x480 93-frame clips, the model's 35 steps (~21 s each),
#                       concurrency 4, CLIP_JOBS=8: ~7 min (>= 1.05x): a call of its own, or
#                       CLIP_JOBS=4 (~4 min). The clips are MP4, which needs FFmpeg's
#                       libraries at run time: where the machine lacks them (the GPU image does;
#                       carried they overrun 64 MiB) the part says so in one line and skips.
#              Settings: NANO_/SUPER_/CLIP_ MIX, STEPS, CONC, JOBS; NANO_LAYERS (36),
#              SUPER_LAYERS (64); SERVE_WARMUP (loadgen --warmup, default 2); SERVE_SUPER_ARGS
#              (more serve options for Super, e.g. --precision fp8 where bf16 does not fit: a
#              server that cannot load is named with its log's last lines); SERVE_DEVICE
#              (default cuda; cpu runs it without a GPU); SERVE_SMOKE=1: the plumbing on the
#              CPU in ~15 s (tiny and demo
#              random folders, small sizes, 2 jobs each): GPU_PACK=build NO_NANO=1
#              SERVE_SMOKE=1 bash bench/gpu.sh serve
# shellcheck shell=bash disable=SC2154 # bin, out, pk, fails, here: set by gpu.sh

# serve_ratio JSON_TODAY JSON_NEW LABEL TARGET: one row of the table, the target judged
serve_ratio() {
    python3 - "$@" <<'PY'
import json, sys
t, n = (json.load(open(p)) for p in sys.argv[1:3])
label, target = sys.argv[3], float(sys.argv[4])
lt, ln = t["levels"][-1], n["levels"][-1]
def r(a, b):
    return b / a if a and b is not None else float("nan")
thr = r(lt["jobs_per_min"], ln["jobs_per_min"])
bad = lt["errors"] or ln["errors"] or not lt["ok"] or not ln["ok"]
print(f"| {label} | {lt['concurrency']} | {lt['ok']}/{lt['jobs']} | {lt['jobs_per_min']:.2f} | {ln['jobs_per_min']:.2f} | "
      f"{thr:.2f} | {lt['p50_s']:.2f} / {ln['p50_s']:.2f} ({r(lt['p50_s'], ln['p50_s']):.2f}x) | "
      f"{lt['p99_s']:.2f} / {ln['p99_s']:.2f} ({r(lt['p99_s'], ln['p99_s']):.2f}x) | "
      f"{ln['batch_mean'] or 1:.2f} | >= {target:g}: {'met' if thr >= target and not bad else 'not met'}"
      f"{' (errors)' if bad else ''} |")
sys.exit(1 if bad else 0)
PY
}

# serve_mp4 DIR: whether this cosmos3 writes MP4 here (a 5-frame clip of a tiny
# random folder made in DIR, on the CPU, 1 step: the encoder serve's
# /v1/videos uses); the reason in $mp4_why when not
serve_mp4() {
    local e
    "$bin" mkmodel --preset tiny --random-transformer -o "$1" --overwrite -q || { mp4_why="mkmodel tiny failed"; return 1; }
    rm -f "$1.mp4"
    if e=$("$bin" gen -m "$1" --device cpu -p "a red cube" -W 64 -H 64 -F 5 --steps 1 -o "$1.mp4" -q 2>&1 >/dev/null) &&
        [ -s "$1.mp4" ]; then
        return 0
    fi
    mp4_why=${e:-no file written}
    return 1
}

sec_serve() {
    local t=/tmp/c3serve dev=${SERVE_DEVICE:-cuda} parts=${SERVE_PARTS:-"nano super clips"}
    local nano_mk=(--preset nano --layers "${NANO_LAYERS:-36}")
    local super_mk=(--preset super --layers "${SUPER_LAYERS:-64}" --distilled)
    local nano_mix=${NANO_MIX:-image:1024x1024} nano_steps=${NANO_STEPS:-50} nano_conc=${NANO_CONC:-8}
    local nano_jobs=${NANO_JOBS:-16} super_mix=${SUPER_MIX:-image:1360x768} super_steps=${SUPER_STEPS:-0}
    local super_conc=${SUPER_CONC:-8} super_jobs=${SUPER_JOBS:-24} clip_mix=${CLIP_MIX:-video:832x480x93}
    local clip_steps=${CLIP_STEPS:-0} clip_conc=${CLIP_CONC:-4} clip_jobs=${CLIP_JOBS:-8}
    local warm=${SERVE_WARMUP:-2}
    if [ -n "${SERVE_SMOKE:-}" ]; then # the plumbing on the CPU: small folders and sizes
        dev=${SERVE_DEVICE:-cpu}
        nano_mk=(--preset tiny) super_mk=(--preset demo --distilled)
        nano_mix=${NANO_MIX:-image:64x64} nano_steps=${NANO_STEPS:-4} nano_conc=${NANO_CONC:-2}
        nano_jobs=${NANO_JOBS:-2} super_mix=${SUPER_MIX:-image:128x96} super_conc=${SUPER_CONC:-2}
        super_jobs=${SUPER_JOBS:-2} clip_mix=${CLIP_MIX:-video:64x64x9} clip_steps=${CLIP_STEPS:-4}
        clip_conc=${CLIP_CONC:-2} clip_jobs=${CLIP_JOBS:-2} warm=${SERVE_WARMUP:-1}
    fi
    local sargs=
    [ "$dev" = cpu ] || sargs="--device $dev"
    section "serve: load.sh, today (--replicas 1 --max-batch 1) vs the new defaults (--max-batch 0), random weights made on load ($parts; device ${dev})"
    if "$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd"; then
        echo "  this pack has no cosmos3 serve: pack with SERVE=1 bash bench/gpu.sh pack"
        counted "serve (not packed)" 1
        return
    fi
    mkdir -p "$t" "$out/serve"
    local models=() p
    local t0
    for p in $parts; do
        case $p in
        nano | clips)
            if [ ! -f "$t/nano/model_index.json" ]; then
                t0=$(date +%s.%N)
                timeout 300 "$bin" mkmodel "${nano_mk[@]}" --random-transformer -o "$t/nano" --overwrite -q ||
                    { counted "mkmodel ${nano_mk[*]} --random-transformer" 1; continue; }
                echo "  mkmodel ${nano_mk[*]} --random-transformer: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, $(du -sh "$t/nano" | cut -f1) on disk"
            fi ;;
        super)
            if [ ! -f "$t/super/model_index.json" ]; then
                t0=$(date +%s.%N)
                timeout 300 "$bin" mkmodel "${super_mk[@]}" --random-transformer -o "$t/super" --overwrite -q ||
                    { counted "mkmodel ${super_mk[*]} --random-transformer" 1; continue; }
                echo "  mkmodel ${super_mk[*]} --random-transformer: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, $(du -sh "$t/super" | cut -f1) on disk"
            fi ;;
        *) echo "  SERVE_PARTS: unknown part '$p' (nano, super, clips)"; counted "serve parts" 1; continue ;;
        esac
        case $p in
        nano)
            models+=("nano=$t/nano")
            export LOAD_nano="--mix $nano_mix --steps $nano_steps --concurrency $nano_conc --jobs $nano_jobs --warmup $warm" ;;
        super)
            models+=("super=$t/super")
            export LOAD_super="--mix $super_mix --steps $super_steps --concurrency $super_conc --jobs $super_jobs --warmup $warm"
            export SERVE_super="${SERVE_SUPER_ARGS:-}" ;;
        clips)
            local mp4_why=
            if ! serve_mp4 "$t/probe"; then
                echo "  clips skipped: serve's /v1/videos answers MP4 only, and this cosmos3 cannot write MP4 here: ${mp4_why}"
                continue
            fi
            models+=("clips=$t/nano")
            export LOAD_clips="--mix $clip_mix --steps $clip_steps --concurrency $clip_conc --jobs $clip_jobs --warmup $warm" ;;
        esac
    done
    [ ${#models[@]} -gt 0 ] || return
    # one server at a time, each configuration of each part, in this call
    CONFIGS="today:--replicas 1 --max-batch 1;new:--replicas 1 --max-batch 0" MODELS="${models[*]}" \
        SERVE_ARGS="$sargs" OUT="$out/serve" TARGETS=none timeout 3000 bash "$here/bench/load.sh" "$pk"
    counted "load.sh" $?
    section "serve: the ratios, new defaults / today, at each part's concurrency (issue 37 item 5 targets)"
    echo "| part | conc | ok | today jobs/min | new jobs/min | x thr | p50 today / new (s) | p99 today / new (s) | new batch mean | target |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    local m name target
    for m in "${models[@]}"; do
        name=${m%%=*}
        case $name in nano) target=1.3 ;; super) target=1.4 ;; *) target=1.05 ;; esac
        if [ -f "$out/serve/$name-today.json" ] && [ -f "$out/serve/$name-new.json" ]; then
            serve_ratio "$out/serve/$name-today.json" "$out/serve/$name-new.json" "$name" "$target"
            counted "serve $name (no failed job)" $?
        else
            echo "| $name | - | - | - | - | - | - | - | - | no result (see $out/serve/$name-*.err) |"
            counted "serve $name" 1
        fi
    done
}
