#!/usr/bin/env bash
# bench/load.sh - the load benchmark (issue 32 item 6): `cosmos3 serve` under
# bench/loadgen.py's mixed stream (pictures and short clips of several sizes)
# at concurrency 1, 2, 4, 8, 16, for today's settings (--replicas 1
# --max-batch 1) and the new ones, on the demo model and on a
# `mkmodel --preset tiny` checkpoint, one server at a time; then the tables
# side by side with the ratios to today's. A benchmark, not a test: the
# numbers depend on the machine and its load.
#   bench/load.sh [BUILD]                   (default build; CPU unless SERVE_ARGS says)
# Settings (environment):
#   CONFIGS      LABEL:SERVE FLAGS entries separated by ';' (the first is the
#                baseline), default
#                "today:--replicas 1 --max-batch 1;batch4:--replicas 1 --max-batch 4;
#                 replicas2:--replicas 2 --max-batch 1;new:--replicas 2 --max-batch 4"
#   MODELS       "demo tiny" (either or both), and model folders as NAME=DIR (NAME: letters,
#                digits, _), e.g. "nano=/tmp/nano" (a `mkmodel --random-transformer` folder
#                makes Nano's or Super's weights on load, no shards on disk)
#   LOAD_NAME    loadgen options for the folder NAME (e.g. LOAD_nano="--mix image:1024x1024
#                --steps 50 --concurrency 8 --jobs 16": later options win over the defaults)
#   SERVE_NAME   more serve options for the folder NAME's servers (e.g. SERVE_super="--precision fp8")
#   CONCURRENCY  1,2,4,8,16      JOBS  48 per level
#   DEMO_LOAD    loadgen options for the demo model (default: its mix, the model's 20 steps)
#   TINY_LOAD    ... for the tiny checkpoint (default: 64x64 and 128x128 pictures, 9- and 17-frame
#                clips, the model's default steps)
#   SERVE_ARGS   more serve options for every server (e.g. --device cuda --gpus 0,1)
#   TARGETS      the ratios judged at concurrency 8: "THROUGHPUT,P50" (default issue 32's
#                1.5,0.7), or none
#   OUT          folder for the servers' logs and loadgen's JSON (default: a new one in $TMPDIR)
# Where serve lacks --replicas/--max-batch (before issue 32's scheduler is
# merged) it says so and measures today's server alone, without those flags.
set -u
build=${1:-build}
bin="$build/cosmos3"
src=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$bin" ] || { echo "load.sh: $bin not found; build first (meson compile -C $build) or give the build folder"; exit 2; }
command -v python3 > /dev/null || { echo "load.sh: needs python3"; exit 2; }
"$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd" && { echo "load.sh: $bin was built without libmicrohttpd (no serve)"; exit 2; }
CONFIGS=${CONFIGS:-"today:--replicas 1 --max-batch 1;batch4:--replicas 1 --max-batch 4;replicas2:--replicas 2 --max-batch 1;new:--replicas 2 --max-batch 4"}
MODELS=${MODELS:-"demo tiny"}
CONCURRENCY=${CONCURRENCY:-1,2,4,8,16}
JOBS=${JOBS:-48}
DEMO_LOAD=${DEMO_LOAD:-}
TINY_LOAD=${TINY_LOAD:-"--mix image:64x64:3,image:128x128:1,video:64x64x9:1,video:64x64x17:1"}
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/cosmos3-load.XXXXXX")}
mkdir -p "$out"
spid=
trap '[ -n "$spid" ] && kill -9 "$spid" 2>/dev/null' EXIT

# the options this serve takes: without the scheduler's, today's server alone
help=$("$bin" serve --help 2>&1)
missing=()
for o in --replicas --max-batch; do grep -q -- "$o" <<< "$help" || missing+=("$o"); done
if [ ${#missing[@]} -gt 0 ]; then
    echo "load.sh: this serve has no ${missing[*]} yet (issue 32's replicas and batching, branch h-serve):"
    echo "load.sh: measuring today's server alone (one engine, one job at a time); merge it and run again"
    CONFIGS="today:"
fi

start() { # NAME MODEL FLAGS...: a server on a free port, $port once ready (10 min at most)
    local name=$1 model=$2; shift 2
    # shellcheck disable=SC2086 # SERVE_ARGS is a word list
    "$bin" serve --port 0 -m "$model" --queue 256 --max-per-client 256 --keep-videos 64 $SERVE_ARGS "$@" \
        > "$out/$name.out" 2> "$out/$name.err" &
    spid=$!
    port=
    for _ in $(seq 6000); do
        [ -z "$port" ] && port=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9]*\) .*/\1/p' "$out/$name.err")
        [ -n "$port" ] && grep -q "ready:" "$out/$name.err" && return 0
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    echo "load.sh: $name did not get ready: $(tail -3 "$out/$name.err")"
    return 1
}
stop() { kill -TERM "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; spid=; }
SERVE_ARGS=${SERVE_ARGS:-}

rc=0
summary=()
for model in $MODELS; do
    extra=
    case $model in
        demo) mdir=demo; load=$DEMO_LOAD ;;
        tiny) mdir="$out/tiny"
              [ -f "$mdir/model_index.json" ] || "$bin" mkmodel --preset tiny -o "$mdir" -q ||
                  { echo "load.sh: mkmodel --preset tiny failed"; rc=1; continue; }
              load=$TINY_LOAD ;;
        *=*) name=${model%%=*} mdir=${model#*=}
             [[ $name =~ ^[A-Za-z0-9_]+$ ]] || { echo "load.sh: MODELS: '$name' (in $model) must be letters, digits and _"; exit 2; }
             [ -f "$mdir/model_index.json" ] || { echo "load.sh: MODELS: $mdir is not a model folder (no model_index.json)"; exit 2; }
             lv=LOAD_$name sv=SERVE_$name
             load=${!lv:-} extra=${!sv:-}
             model=$name ;;
        *) echo "load.sh: MODELS: '$model' is neither demo, tiny nor NAME=DIR"; exit 2 ;;
    esac
    jsons=()
    IFS=';' read -ra cfgs <<< "$CONFIGS"
    for cfg in "${cfgs[@]}"; do
        label=${cfg%%:*} flags=${cfg#*:}
        echo "== $model, $label: serve ${flags:-(no flags)}${extra:+ $extra}"
        # shellcheck disable=SC2086 # flags and extra are word lists
        start "$model-$label" "$mdir" $flags $extra || { rc=1; stop; continue; }
        grep -E "ready:|layout|replica" "$out/$model-$label.err" | sed 's/^/   /'
        # shellcheck disable=SC2086 # load is a word list
        python3 "$src/bench/loadgen.py" --url "http://127.0.0.1:$port" --concurrency "$CONCURRENCY" \
            --jobs "$JOBS" --label "$label" --json "$out/$model-$label.json" $load || rc=1
        stop
        jsons+=("$out/$model-$label.json")
    done
    if [ ${#jsons[@]} -gt 0 ]; then
        summary+=("$model")
        {
            echo
            echo "### $model ($(date -u +%Y-%m-%d), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
            echo
            python3 "$src/bench/loadgen.py" --compare "${jsons[@]}" --targets "${TARGETS:-1.5,0.7}"
        } | tee "$out/$model-compare.md"
    fi
done
echo
echo "load.sh: logs, JSON and the tables (*-compare.md) in $out"
exit $rc
