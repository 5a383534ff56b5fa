#!/usr/bin/env bash
# bench/repl_speed.sh - seconds per denoising step on the CPU: `gen` against
# the REPL (and the server when built with it), same prompt, size and steps,
# back to back; prints the REPL/gen ratio. A benchmark, not a test: the
# numbers depend on the machine and its load.
#   bench/repl_speed.sh [BUILD/cosmos3] [RUNS]     (default build/cosmos3, 3 runs)
# The user's environment is used as it is (OMP_*, OPENBLAS_* included), so
#   OMP_WAIT_POLICY=active bench/repl_speed.sh    shows the spinning case.
set -u
bin=${1:-build/cosmos3}
runs=${2:-3}
size=${SIZE:-64}
steps=${STEPS:-50}
prompt="a red circle on a blue background"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v jq > /dev/null || { echo "repl_speed: needs jq"; exit 1; }
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
gen_t=() repl_t=()
for i in $(seq "$runs"); do
    g=$("$bin" gen -p "$prompt" -W "$size" -H "$size" --steps "$steps" --seed 1 -o "$tmp/g.png" --overwrite \
        --device cpu --json -q 2>/dev/null | jq .seconds.step_mean)
    r=$(printf 'set width %s\nset height %s\nset steps %s\nseed 1\nset output %s\nset overwrite on\n%s\nlast\n' \
        "$size" "$size" "$steps" "$tmp/r.png" "$prompt" | "$bin" repl --device cpu 2>/dev/null |
        sed -n 's/.*denoise \([0-9.]*\) (.*/\1/p' | awk -v n="$steps" '{printf "%.5f", $1 / n}')
    gen_t+=("$(printf %.5f "$g")")
    repl_t+=("$r")
done
gm=$(printf '%s\n' "${gen_t[@]}" | median)
rm=$(printf '%s\n' "${repl_t[@]}" | median)
echo "demo model ${size}x${size}, $steps steps, $runs runs, OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)}"
echo "gen   s/step: ${gen_t[*]}  (median $gm)"
echo "repl  s/step: ${repl_t[*]}  (median $rm)"
awk -v g="$gm" -v r="$rm" 'BEGIN { if (g > 0) printf "repl/gen per-step ratio: %.2f\n", r / g; else print "repl/gen: gen time is 0" }'
