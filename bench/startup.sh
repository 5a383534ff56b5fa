#!/usr/bin/env bash
# bench/startup.sh - what a command costs before it does anything: the
# commands that load no model (--version, help, meta and info of a PNG; info
# of a WebM, which loads FFmpeg), side by side for one or more builds, beside
# /bin/true. Per command: the mean wall time and CPU time over RUNS runs
# (perf stat when it is there, else bash's time), the peak resident memory,
# and the shared objects the dynamic linker loads. A benchmark, not a test:
# the numbers depend on the machine and its load (run it on an idle one).
#   bench/startup.sh [RUNS] [BUILD/cosmos3 ...]    (default 20 runs, build/cosmos3)
# e.g. bench/startup.sh 20 /work/main/build/cosmos3 build/cosmos3
set -u
runs=${1:-20}
shift || true
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(build/cosmos3)
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
first=${bins[0]}
"$first" gen -m "$src/share/models/demo" -p "a red circle on a blue background" -s 2 -S 1 \
    -o "$tmp/pic.png" --device cpu -q 2>/dev/null || { echo "startup: gen pic.png failed"; exit 1; }
"$first" gen -m "$src/share/models/demo" -p "a red circle on a blue background" -s 2 -S 1 -F 5 \
    -o "$tmp/clip.webm" --device cpu -q 2>/dev/null || echo "startup: no clip.webm (built without FFmpeg?)"
have_perf=0
perf stat -r 1 true >/dev/null 2>&1 && have_perf=1

# measure NAME CMD...: mean wall ms, mean CPU ms, peak RSS KB, objects loaded
measure() {
    local wall cpu rss objs
    if [ $have_perf = 1 ]; then
        local out
        out=$(perf stat -r "$runs" -x, -e task-clock "$@" 2>&1 >/dev/null | grep task-clock)
        cpu=$(echo "$out" | cut -d, -f1)
        local t0 t1
        t0=$(date +%s%N)
        for _ in $(seq "$runs"); do "$@" >/dev/null 2>&1; done
        t1=$(date +%s%N)
        wall=$(awk -v a="$t0" -v b="$t1" -v n="$runs" 'BEGIN { printf "%.1f", (b - a) / n / 1e6 }')
    else
        local t0 t1 c0 c1
        t0=$(date +%s%N)
        c0=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
        for _ in $(seq "$runs"); do "$@" >/dev/null 2>&1; done
        t1=$(date +%s%N)
        c1=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
        wall=$(awk -v a="$t0" -v b="$t1" -v n="$runs" 'BEGIN { printf "%.1f", (b - a) / n / 1e6 }')
        cpu=$(awk -v a="$c0" -v b="$c1" -v n="$runs" -v hz="$(getconf CLK_TCK)" \
            'BEGIN { printf "%.1f", (b - a) / hz / n * 1e3 }')
    fi
    rss=-
    [ -x /usr/bin/time ] && /usr/bin/time -f '%M' -o "$tmp/rss" "$@" >/dev/null 2>&1 && rss=$(tail -1 "$tmp/rss")
    objs=$(LD_DEBUG=files "$@" 2>&1 >/dev/null | grep -o 'file=[^ ]*' | sort -u | wc -l)
    printf '%-28s %9s %9s %9s %6s\n' "$name" "$wall" "$(printf %.1f "$cpu")" "$rss" "$objs"
}

echo "startup: $runs runs each, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %9s %9s %9s %6s\n' command "wall ms" "cpu ms" "rss KB" "libs"
name="/bin/true" measure /bin/true
for b in "${bins[@]}"; do
    echo "-- $b"
    for c in "--version" "help" "meta $tmp/pic.png" "info $tmp/pic.png" "info $tmp/clip.webm"; do
        case $c in *clip.webm) [ -s "$tmp/clip.webm" ] || continue ;; esac
        name=$(echo "$c" | sed "s|$tmp/||")
        # shellcheck disable=SC2086 # c: words
        measure "$b" $c
    done
done
