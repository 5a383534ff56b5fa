#!/usr/bin/env bash
# speed_items.sh DIR - issue 7, items 5 and 6, on the GPU machine, with the
# cosmos3 in DIR (a carry_pack folder, e.g. carry/demo from demo_gpu.sh pack):
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
