# shellcheck shell=bash
#     step     the CFG step against main's binaries in the same call (issue 37 item 3):
#              ops_check --passes (RMSNorm, SwiGLU at the Nano row counts, the F32 host
#              transfers vs pageable copies), then cosmos3 bench Nano 36 layers at
#              STEP_SIZES (default "t2i 480p 720p"), this pack and the base pack in
#              STEP_BASE (default carry/gpu-base) interleaved (base, new, then new, base;
#              720p once each), device time by op, the means side by side. The base pack:
#              in main's checkout, GPU_PACK=carry/gpu-base GPU_FX=carry/gpu-base/none.txz
#              NO_FIXTURES=1 NO_OPS=1 bash bench/gpu.sh pack build-base; carry both
# pk, out, bin, fails: gpu.sh's (this file is sourced there)
# shellcheck disable=SC2154

# step_bench WHICH NAME ARGS...: cosmos3 bench --json of the new (gpu.sh's) or
# the base pack's program into $out/step/WHICH_NAME.json, one line
step_bench() {
    local w=$1 n=$2 b=$bin lp=${LD_LIBRARY_PATH:-}
    shift 2
    if [ "$w" = base ]; then
        b=$step_base/x/cosmos3
        lp=$step_base/x/lib:$lp
    fi
    LD_LIBRARY_PATH=$lp timeout 300 "$b" bench --preset nano --skip-vae --json -q "$@" \
        >"$out/step/${w}_$n.json" 2>"$out/step/${w}_$n.err" ||
        { tail -3 "$out/step/${w}_$n.err"; counted "bench $w $n" 1; return; }
    python3 - "$out/step/${w}_$n.json" "$w $n" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
dv = d.get("device_ops") or {}
ops = ", ".join(f"{k} {v['ms']:.2f}" for k, v in (dv.get("ops") or {}).items())
print(f"  {sys.argv[2]:10s} step {d['step_ms']:9.2f} ms (min {d['step_ms_min']:.2f}) MFU {d['mfu']:.3f} | "
      f"by op (ms): {ops}")
PY
}

sec_step() {
    step_base=${STEP_BASE:-carry/gpu-base}
    section "step: ops_check --passes (RMSNorm, SwiGLU, the F32 host transfers; this pack)"
    if [ -x "$pk/ops_check" ]; then
        timeout 300 "$pk/ops_check" --passes >"$out/ops_passes.log" 2>&1
        counted "ops_check --passes" $?
        grep -E '^  M |f32 host|FAIL|ops_check:' "$out/ops_passes.log"
    else
        echo "ops_check not carried (NO_OPS=1 at pack): skipped"
    fi
    if [ ! -f "$step_base/pack.tar.xz" ] && [ ! -x "$step_base/x/cosmos3" ]; then
        echo "step: no base pack in $step_base (see the section's help): the A/B skipped"
        counted "step base pack" 1
        return
    fi
    # the base pack apart from this one (its own libcosmos3 and CUDA module)
    mkdir -p "$step_base/x" "$out/step"
    [ -x "$step_base/x/cosmos3" ] || tar -C "$step_base/x" -xJf "$step_base/pack.tar.xz" || {
        counted "step base unpack" 1
        return
    }
    local src
    src=$(cat "$step_base/srcdir" 2>/dev/null || true)
    [ -z "$src" ] || [ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -s "$here" "$src"; }
    section "step: cosmos3 bench Nano 36 layers, base ($step_base) vs this pack, interleaved"
    local want=" ${STEP_SIZES:-t2i 480p 720p} " r w
    for r in 1 2; do
        for w in base new; do
            [ "$r" = 2 ] && { [ "$w" = base ] && w=new || w=base; }
            [[ $want == *" t2i "* ]] && step_bench "$w" "t2i_$r" -W 1024 -H 1024 --steps 30
            [[ $want == *" 480p "* ]] && step_bench "$w" "480p_$r" -W 832 -H 480 -F 93 --steps 4
            [[ $want == *" 720p "* ]] && [ "$r" = 1 ] && step_bench "$w" 720p -W 1280 -H 720 -F 189 --steps 2
        done
    done
    section "step: means, base vs this pack (device time by op from each run's op-by-op step)"
    python3 - "$out/step" <<'PY'
import glob, json, os, sys
def ld(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
for size in ("t2i", "480p", "720p"):
    row = {}
    for w in ("base", "new"):
        js = [j for j in map(ld, sorted(glob.glob(os.path.join(sys.argv[1], f"{w}_{size}*.json")))) if j]
        if not js:
            continue
        ops = {}
        for j in js:
            for k, v in ((j.get("device_ops") or {}).get("ops") or {}).items():
                ops[k] = ops.get(k, 0) + v["ms"] / len(js)
        row[w] = (sum(j["step_ms"] for j in js) / len(js), ops, len(js))
    if len(row) < 2:
        continue
    (sb, ob, nb), (sn, on, nn) = row["base"], row["new"]
    print(f"  {size:5s} step: base {sb:9.2f} ms, new {sn:9.2f} ms ({nb} / {nn} runs): new / base {sn / sb:.4f} "
          f"({sn - sb:+.2f} ms)")
    for k in ob:
        if k in on:
            print(f"        {k:18s} base {ob[k]:9.3f}  new {on[k]:9.3f} ms  ({on[k] - ob[k]:+.3f})")
PY
}
