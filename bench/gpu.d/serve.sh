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
#                super  Super-4Step 1360x768 pictures, 64 layers (~0.7 s each; its 125 GB of bf16
#                       made on the GPU at load), concurrency 8, SUPER_JOBS=24: ~1.5-3 min (>= 1.4x)
#                clips  Nano 832x480 93-frame clips, the model's 35 steps (~21 s each),
#                       concurrency 4, CLIP_JOBS=8: ~7 min (>= 1.05x): a call of its own, or
#                       CLIP_JOBS=4 (~4 min). The clips are MP4, which needs FFmpeg's
#                       libraries at run time: where the machine lacks them (the GPU image does;
#                       carried they overrun 64 MiB) the part says so in one line and skips.
#              Settings: NANO_/SUPER_/CLIP_ MIX, STEPS, CONC, JOBS; NANO_LAYERS (36),
#              SUPER_LAYERS (64); SERVE_WARMUP, SERVE_WARMUP_CONC (loadgen's warm-up jobs, 2, and
#              their clients, 1: =8 with SERVE_WARMUP=8 shows the batching server its
#              batch shapes before the timing, ~20 s more per picture part); SERVE_SUPER_ARGS
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
def r(a, b):  # new / today
    return b / a if a and b is not None else float("nan")
def f(x):
    return "-" if x is None else f"{x:.2f}"
thr = r(lt["jobs_per_min"], ln["jobs_per_min"])
bad = lt["errors"] or ln["errors"] or not lt["ok"] or not ln["ok"]
print(f"| {label} | {lt['concurrency']} | {lt['ok']}/{lt['jobs']}, {ln['ok']}/{ln['jobs']} | {f(lt['jobs_per_min'])} | "
      f"{f(ln['jobs_per_min'])} | {thr:.2f} | {f(lt['p50_s'])} / {f(ln['p50_s'])} ({r(lt['p50_s'], ln['p50_s']):.2f}x) | "
      f"{f(lt['p99_s'])} / {f(ln['p99_s'])} ({r(lt['p99_s'], ln['p99_s']):.2f}x) | "
      f"{f(ln['batch_mean'] or 1)} | >= {target:g}: {'met' if thr >= target and not bad else 'not met'}"
      f"{' (failed jobs: ' + str(lt['errors']) + ', ' + str(ln['errors']) + ')' if bad else ''} |")
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
    local warm=${SERVE_WARMUP:-2} warm_conc=${SERVE_WARMUP_CONC:-1}
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
    local head="| part | conc | ok today, new | today jobs/min | new jobs/min | x thr | p50 today / new (s) | p99 today / new (s) | new batch mean | target |"
    local rows=() row p name dir load sv target mp4_why
    for p in $parts; do
        case $p in
        nano) name=nano dir=$t/nano target=1.3 sv=
              load="--mix $nano_mix --steps $nano_steps --concurrency $nano_conc --jobs $nano_jobs" ;;
        super) name=super dir=$t/super target=1.4 sv=${SERVE_SUPER_ARGS:-}
               load="--mix $super_mix --steps $super_steps --concurrency $super_conc --jobs $super_jobs" ;;
        clips) name=clips dir=$t/nano target=1.05 sv=
               load="--mix $clip_mix --steps $clip_steps --concurrency $clip_conc --jobs $clip_jobs"
               mp4_why=
               if ! serve_mp4 "$t/probe"; then
                   echo "  clips skipped: serve's /v1/videos answers MP4 only, and this cosmos3 cannot write MP4 here: ${mp4_why}"
                   rows+=("| clips | - | - | - | - | - | - | - | - | skipped: no MP4 here |")
                   continue
               fi ;;
        *) echo "  SERVE_PARTS: unknown part '$p' (nano, super, clips)"; counted "serve parts" 1; continue ;;
        esac
        serve_folder "$dir" "$p" || { counted "mkmodel for $p" 1; continue; }
        section "serve: $p (load.sh: today, then new; ${load})"
        serve_part "$name" "$dir" "$load --warmup $warm --warmup-concurrency $warm_conc" "$sv"
        # Super in bf16 (~116 GiB of weights) where it does not fit: the same measurement with
        # its weights quantised on load (FP8), said in the row
        if [ "$p" = super ] && [ -z "$sv" ] && [ ! -f "$out/serve/super-today.json" ] &&
            grep -q -i "memory\|needs .* GiB" "$out/serve/super-today.err" 2>/dev/null; then
            echo "  Super in bf16 does not fit this GPU: $(grep -i -m1 "memory\|needs .* GiB" "$out/serve/super-today.err")"
            echo "  the same with --precision fp8 (weights quantised on load):"
            name=super_fp8
            serve_part "$name" "$dir" "$load --warmup $warm --warmup-concurrency $warm_conc" "--precision fp8"
        fi
        serve_row "$name" "$target"
        rows+=("$row")
        echo "$head"
        echo "$row"
    done
    [ ${#rows[@]} -gt 0 ] || return
    section "serve: the ratios, new defaults / today, at each part's concurrency (issue 37 item 5 targets)"
    echo "$head"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
}

# serve_folder DIR PART: the part's random folder (mkmodel --random-transformer), once
serve_folder() {
    [ -f "$1/model_index.json" ] && return 0
    local mk=("${nano_mk[@]}") t0
    [ "$2" = super ] && mk=("${super_mk[@]}")
    t0=$(date +%s.%N)
    timeout 300 "$bin" mkmodel "${mk[@]}" --random-transformer -o "$1" --overwrite -q || return 1
    echo "  mkmodel ${mk[*]} --random-transformer: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, $(du -sh "$1" | cut -f1) on disk"
}

# serve_part NAME DIR LOADGEN_OPTIONS SERVE_OPTIONS: load.sh on one folder, today then new
serve_part() {
    local lv=LOAD_$1 sv=SERVE_$1
    export "$lv=$3" "$sv=$4"
    CONFIGS="today:--replicas 1 --max-batch 1;new:--replicas 1 --max-batch 0" MODELS="$1=$2" \
        SERVE_ARGS="$sargs" OUT="$out/serve" TARGETS=none timeout 3000 bash "$here/bench/load.sh" "$pk"
    counted "load.sh $1" $?
}

# serve_row NAME TARGET: the part's row of the table (its JSON of today and new) into $row,
# a failed job or a missing result counted
serve_row() {
    if [ -f "$out/serve/$1-today.json" ] && [ -f "$out/serve/$1-new.json" ]; then
        row=$(serve_ratio "$out/serve/$1-today.json" "$out/serve/$1-new.json" "$1" "$2")
        counted "serve $1 (no failed job)" $?
    else
        row="| $1 | - | - | - | - | - | - | - | - | no result: $(tail -1 "$out/serve/$1-today.err" 2>/dev/null | cut -c1-160) |"
        counted "serve $1" 1
    fi
}
