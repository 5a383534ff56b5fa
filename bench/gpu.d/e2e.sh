# shellcheck shell=bash
#     e2e      the whole video timed in phases (issue 24 items 2, 5, 6): the full
#              Nano checkpoint made by mkmodel on /tmp (timed), the headline gen
#              1280x720, 189 frames, E2E_STEPS (35) steps, --json, PNG frames (the
#              pack has no FFmpeg), its phases and the SM clock over the run;
#              launch to the first step of a 1-step 256x256 gen on the same
#              checkpoint (page cache warm) with the shard prefault, without
#              (COSMOS3_PREFAULT=0) and with the pinned staging ring
#              (COSMOS3_PINNED_LOAD=1); `cosmos3 bench --preset nano` 720p/189f
#              --steps 2 beside gen's step (why gen's step is slower; the SM
#              clock over each). About 6
#              minutes on an H200 (mkmodel ~1, gen ~4.5). E2E_TINY=1: a dry run
#              on the tiny preset at 128x128/9 frames (the CPU here: see
#              bench/NOTES.md, session 8 e2e); E2E_SKIP_GEN=1 leaves the headline gen out,
#              E2E_GEN_ARGS adds options to the headline gen (e.g. "--precision fp8
#              --attention fp8"), E2E_ONLY_GEN=1 stops after it,
#              E2E_COLD=1 adds two launches from a cold page cache (prefault on /
#              off), E2E_CKPT the checkpoint's folder (kept when it exists)
# Sourced by bench/gpu.sh (setup has run: $bin, $out, counted, section).
# shellcheck disable=SC2154 # bin, out: set by gpu.sh setup

# e2e_phases FILE LABEL: the phases of one `gen --json`, one line each
e2e_phases() {
    python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p, l, s = d["phases"], d["phases"]["load"], d["phases"]["steps"]
print(f"  {sys.argv[2]}: {d['width']}x{d['height']}, {d['frames']} frames, {s['count']} steps on {d['layout']['device']}")
print(f"    total {p.get('total', 0):.2f} s = start {p.get('start', 0):.2f} + load {l['total']:.2f} + generate {p['generate']:.2f} (+ exit)")
print(f"    load: read {l['read']:.2f} (prefault {l['prefault_bytes'] / 2**30:.1f} GiB), backends {l['backends']:.2f}, "
      f"weights {l['weights']:.2f}, vae {l['vae']:.2f}, tokenizer {l['tokenizer']:.2f} (own thread)")
print(f"    launch to first step {p.get('launch_to_first_step', 0):.2f} s")
print(f"    tokenize {p['tokenize']:.3f}, und {p['und']:.3f}, steps {s['total']:.2f} (first {s['first']:.3f}, mean {s['mean']:.3f}, "
      f"rest {s['rest_mean']:.3f}, host {s['host_mean'] * 1e3:.1f} ms a step), decode {p['decode']:.2f}, other {p['other']:.2f}, "
      f"write {p['write']:.2f} (encode {p['encode']:.2f})")
PY
}

# e2e_clocks_start FILE: the SM clock, power and temperature every 2 s into FILE
# (nvidia-smi in the background; its PID in e2e_smi, none without a GPU)
e2e_clocks_start() {
    e2e_smi=
    command -v nvidia-smi >/dev/null && [ "$dev" = cuda ] || return 0
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader \
        -l 2 >"$1" 2>/dev/null &
    e2e_smi=$!
}
# e2e_clocks_stop FILE LABEL: stop the sampler, one line of means
e2e_clocks_stop() {
    [ -n "$e2e_smi" ] && kill "$e2e_smi" 2>/dev/null && wait "$e2e_smi" 2>/dev/null
    e2e_smi=
    [ -s "$1" ] || return 0
    awk -F', ' -v label="$2" '{ split($2, c, " "); split($3, w, " "); n++; s += c[1]; if (n == 1 || c[1] < lo) lo = c[1];
                  if (c[1] > hi) hi = c[1]; p += w[1] }
                END { if (n) printf "  SM clock over the %s: mean %.0f MHz (min %d, max %d), power mean %.0f W, %d samples\n",
                      label, s / n, lo, hi, p / n, n }' "$1"
}

sec_e2e() {
    local preset=nano W=1280 H=720 F=189 steps=${E2E_STEPS:-35} lw=256 lh=256 dev=cuda
    local ck=${E2E_CKPT:-/tmp/c3e2e_nano} frames=/tmp/c3e2e_frames
    if [ -n "${E2E_TINY:-}" ]; then
        preset=tiny W=128 H=128 F=9 steps=${E2E_STEPS:-3} lw=64 lh=64 dev=${E2E_DEVICE:-cpu}
        ck=${E2E_CKPT:-$out/c3e2e_tiny} frames=$out/c3e2e_frames
    fi
    local P="a red cube on a wooden table, the camera circling it slowly"
    section "e2e: $preset ${W}x${H}/${F}f, $steps steps, in phases; launch to the first step; bench beside gen"
    df -h "$(dirname "$ck")" | tail -1
    local rc t0
    if [ ! -f "$ck/model_index.json" ]; then
        t0=$(date +%s.%N)
        timeout 420 "$bin" mkmodel --preset $preset --seed 7 -o "$ck" --overwrite -q
        rc=$?
        counted "mkmodel --preset $preset" $rc
        echo "  mkmodel: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, $(du -sh "$ck" | cut -f1)"
        [ $rc = 0 ] || return
    fi
    # the headline: the whole video, PNG frames, the SM clock every 2 s beside it
    if [ -z "${E2E_SKIP_GEN:-}" ]; then
        rm -rf "$frames"
        e2e_clocks_start "$out/e2e_clocks.csv"
        # shellcheck disable=SC2086 # E2E_GEN_ARGS: words
        timeout 560 "$bin" gen -m "$ck" --device "$dev" -p "$P" -W $W -H $H --frames $F -s "$steps" --seed 1 \
            ${E2E_GEN_ARGS:-} -o "$frames/" --json >"$out/e2e_gen.json" 2>"$out/e2e_gen.err"
        rc=$?
        e2e_clocks_stop "$out/e2e_clocks.csv" gen
        tail -3 "$out/e2e_gen.err"
        counted "gen ${W}x${H}/${F}f $steps steps" $rc
        local n
        n=$(find "$frames" -name 'frame_*.png' 2>/dev/null | wc -l)
        [ "$n" = "$F" ] && rc=0 || rc=1
        counted "gen wrote $n of $F frames" $rc
        [ -s "$out/e2e_gen.json" ] && e2e_phases "$out/e2e_gen.json" "gen"
        rm -rf "$frames"
    fi
    [ -n "${E2E_ONLY_GEN:-}" ] && return
    # launch to the first step, page cache warm: with the prefault, without, again with, and
    # with the pinned staging ring (COSMOS3_PINNED_LOAD=1, the default since session 8; 0 off)
    local tag pf pin
    for tag in prefault noprefault prefault2 pinned; do
        pf=1 pin=0
        [ $tag = noprefault ] && pf=0
        [ $tag = pinned ] && pin=1
        COSMOS3_PREFAULT=$pf COSMOS3_PINNED_LOAD=$pin timeout 120 "$bin" gen -m "$ck" --device "$dev" -p "$P" -W $lw -H $lh -s 1 --seed 1 \
            -o "$out/e2e_launch_$tag.png" --overwrite --json >"$out/e2e_launch_$tag.json" 2>"$out/e2e_launch_$tag.err"
        rc=$?
        counted "launch gen ($tag)" $rc
        [ $rc = 0 ] && e2e_phases "$out/e2e_launch_$tag.json" "launch, $tag"
    done
    # E2E_COLD=1: the same from a cold page cache (the checkpoint's pages dropped), prefault on / off
    if [ -n "${E2E_COLD:-}" ]; then
        for tag in cold_prefault cold_noprefault; do
            pf=1
            [ $tag = cold_noprefault ] && pf=0
            python3 - "$ck" <<'PY'
import glob, os, sys
for f in glob.glob(os.path.join(sys.argv[1], "**", "*.safetensors"), recursive=True):
    fd = os.open(f, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
            COSMOS3_PREFAULT=$pf timeout 180 "$bin" gen -m "$ck" --device "$dev" -p "$P" -W $lw -H $lh -s 1 --seed 1 \
                -o "$out/e2e_launch_$tag.png" --overwrite --json >"$out/e2e_launch_$tag.json" 2>"$out/e2e_launch_$tag.err"
            rc=$?
            counted "launch gen ($tag)" $rc
            [ $rc = 0 ] && e2e_phases "$out/e2e_launch_$tag.json" "launch, $tag"
        done
    fi
    cmp -s "$out/e2e_launch_prefault.png" "$out/e2e_launch_noprefault.png"
    counted "the 1-step picture is the same with and without the prefault" $?
    cmp -s "$out/e2e_launch_prefault.png" "$out/e2e_launch_pinned.png"
    counted "the 1-step picture is the same with the pinned staging" $?
    # bench's step at the same size beside gen's (item 5)
    e2e_clocks_start "$out/e2e_clocks_bench.csv"
    benchj e2e_bench --preset $preset -W $W -H $H -F $F --steps 2 --skip-vae --device "$dev"
    e2e_clocks_stop "$out/e2e_clocks_bench.csv" bench
    python3 - "$out/e2e_gen.json" "$out/e2e_bench.json" <<'PY'
import json, os, sys
if not (os.path.exists(sys.argv[1]) and os.path.getsize(sys.argv[1]) and os.path.exists(sys.argv[2])):
    print("  gen vs bench: a result is missing"); sys.exit(0)
s, b = json.load(open(sys.argv[1]))["phases"]["steps"], json.load(open(sys.argv[2]))
print(f"  step: gen mean {s['mean']:.3f} s (first {s['first']:.3f}, rest {s['rest_mean']:.3f}, host work {s['host_mean'] * 1e3:.1f} ms), "
      f"bench {b['step_ms'] / 1e3:.3f} s (min {b['step_ms_min'] / 1e3:.3f}): gen / bench {s['mean'] / (b['step_ms'] / 1e3):.3f}, "
      f"rest / bench {s['rest_mean'] / (b['step_ms'] / 1e3):.3f}")
PY
    rm -f "$out"/e2e_launch_*.png
    [ -n "${E2E_KEEP:-}" ] || [ -n "${E2E_CKPT:-}" ] || rm -rf "$ck"
}
