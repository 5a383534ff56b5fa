#!/usr/bin/env bash
# speed_items.sh DIR - issue 7, items 4, 5 and 6 (ITEMS="4 5 6", the default),
# on the GPU machine, with the cosmos3 in DIR (a carry_pack folder, e.g.
# carry/demo from demo_gpu.sh pack):
#   4. the GEN layer loop replayed as a CUDA graph against queued op by op
#      (COSMOS3_GRAPHS=0): CFG step at T2I 1024^2 and 480p (Nano, 36 layers),
#      torch_ref.py's step at T2I beside them; final latents of a demo
#      request with and without graphs, byte for byte;
#   5. the VAE decode at T2I 1024^2 against the whole T2I request
#      (50 CFG steps of Nano, 36 layers, + UND + VAE + PNG);
#   6. --offload against resident weights at 720p/189f (4 layers: each
#      layer's copy hides behind the previous layer's compute) and at T2I
#      1024^2 (36 layers: PCIe cannot hide it), with the host-to-device rate.
# Logs and JSON to $OUT.
set -u -o pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
. bench/carry.sh
pk=${1:-carry/demo}
out=${OUT:-/tmp/speed_items}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
carry_env "$pk"
bin=$pk/cosmos3
PRESET=${PRESET:-nano}
ITEMS=${ITEMS:-4 5 6}
has() { [[ " $ITEMS " == *" $1 "* ]]; }
if has 4; then
echo "=== 4. GEN layer loop as a CUDA graph vs op by op"
for size in "-W 1024 -H 1024 --steps 10" "-W 832 -H 480 -F 93 --steps 2"; do
    $bin bench --preset $PRESET $size --skip-vae --json -q >"$out/g1.json" || exit 1
    COSMOS3_GRAPHS=0 $bin bench --preset $PRESET $size --skip-vae --json -q >"$out/g0.json" || exit 1
    python3 - "$out/g1.json" "$out/g0.json" "$size" <<'PY'
import json, sys
g, e = (json.load(open(p)) for p in sys.argv[1:3])
print(f"{sys.argv[3]}: graphs {g['step_ms']:.2f} ms (min {g['step_ms_min']:.2f}), op by op {e['step_ms']:.2f} ms "
      f"(min {e['step_ms_min']:.2f}) per CFG step: the gaps graphs remove = {100 * (1 - g['step_ms'] / e['step_ms']):.2f} % "
      f"of the op-by-op step; MFU {g['mfu']:.3f}")
PY
done
timeout 120 python3 bench/torch_ref.py bench --sizes t2i --attn-s 1024 --reps 10 2>&1 | grep -E "torch CFG step|cuDNN SDPA"
python3 - "$out" <<'PY'
import struct, json, sys, os
def st(path, t):  # one f32 tensor named latents
    import array
    a = array.array("f", t)
    h = json.dumps({"latents": {"dtype": "F32", "shape": [1, 48, 1, 4, 4], "data_offsets": [0, 4 * len(a)]}}).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + a.tobytes())
import random
random.seed(7)
st(os.path.join(sys.argv[1], "noise.safetensors"), [random.gauss(0, 1) for _ in range(48 * 16)])
PY
for gr in 1 0; do
    COSMOS3_GRAPHS=$gr $bin gen -p "a red circle on a blue background, on the right" --noise "$out/noise.safetensors" \
        --save-latents "$out/lat_g$gr.safetensors" -o "$out/g$gr.png" --overwrite -q --device cuda || exit 1
done
cmp "$out/lat_g1.safetensors" "$out/lat_g0.safetensors" && echo "demo request: final latents byte-identical with and without graphs"
fi
if has 5; then
echo "=== 5. T2I 1024^2, $PRESET: CFG step and the VAE decode"
$bin bench --preset $PRESET -W 1024 -H 1024 --steps 5 --json -q >"$out/t2i.json" || exit 1
python3 - "$out/t2i.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
o = d["outside_loop"]
und = o["und_cond_ms"] + o["und_uncond_ms"]
total = 50 * d["step_ms"] + und + o["vae_decode_ms"] + o["png_ms"]
print(f"step {d['step_ms']:.2f} ms, UND {und:.2f} ms, VAE decode {o['vae_decode_ms']:.2f} ms, PNG {o['png_ms']:.2f} ms; "
      f"50-step request {total / 1e3:.3f} s, VAE share {100 * o['vae_decode_ms'] / total:.2f} %")
PY
fi
if has 6; then
echo "=== 6. --offload vs resident"
for size in "-W 1280 -H 720 -F 189 --layers 4 --steps 2" "-W 1024 -H 1024 --steps 3"; do
    $bin bench --preset $PRESET $size --skip-vae --json -q >"$out/res.json" || exit 1
    $bin bench --preset $PRESET $size --skip-vae --offload --json -q >"$out/off.json" || exit 1
    python3 - "$out/res.json" "$out/off.json" "$size" <<'PY'
import json, sys
r, o = (json.load(open(p)) for p in sys.argv[1:3])
def step(d):
    return d["step_ms"]
print(f"{sys.argv[3]}: resident {step(r):.2f} ms, offload {step(o):.2f} ms per CFG step "
      f"({100 * (step(o) / step(r) - 1):+.2f} %), {o.get('h2d_bytes', 0) / 1e9:.2f} GB streamed at "
      f"{o.get('h2d_gbps', 0):.1f} GB/s")
PY
done
fi
