#!/usr/bin/env python3
"""vae_ref.py - bench/reference/torch_ref.py's Wan2.2 decoder (plain PyTorch, cuDNN
convolutions) timed on the same VAE checkpoint and latent sizes as
`cosmos3 bench`: the reference side of the VAE-decode rows of RESULTS.md.

  python3 bench/reference/vae_ref.py MODEL_DIR [--sizes 1024x1024x1,832x480x93,1280x720x189]
      [--dtype bf16|fp32] [--json-out FILE]

Latents: standard normal, [48, T, h, w] (T = (F - 1) / 4 + 1, h = H / 16);
the decode speed does not depend on their values (random, not zeros).
Each size: one warm-up decode of the size (skipped for frames > 93, where
the smaller video warmed up the same kernels), then reps decodes timed with
CUDA events; the median is printed."""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_ref as tr  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--sizes", default="1024x1024x1,832x480x93,1280x720x189")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json-out", default="")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    vdir = os.path.join(a.model, "vae")
    cfg = json.load(open(os.path.join(vdir, "config.json")))
    t0 = time.time()
    vae = tr.WanVAE(cfg, tr.load_folder_tensors(vdir), "cuda", dt)
    print(f"vae_ref: loaded {vdir} in {time.time() - t0:.1f} s ({a.dtype})", flush=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    res = {}
    for s in a.sizes.split(","):
        W, H, F = (int(v) for v in s.split("x"))
        T, h, w = (F - 1) // 4 + 1, H // 16, W // 16
        z = torch.randn(cfg["z_dim"], T, h, w, generator=g, device="cuda")
        reps = a.reps if F <= 93 else 1
        ms = []
        with torch.inference_mode():
            if F <= 93:
                vae.decode(z)
            for _ in range(reps):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                out = vae.decode(z)
                e1.record()
                torch.cuda.synchronize()
                ms.append(e0.elapsed_time(e1))
        ms.sort()
        med = ms[len(ms) // 2]
        print(f"vae_ref {W}x{H}x{F} ({a.dtype}): decode {med:.1f} ms (median of {reps}), out {list(out.shape)}",
              flush=True)
        res[s] = med
        del out
        torch.cuda.empty_cache()
    if a.json_out:
        json.dump(res, open(a.json_out, "w"), indent=1)


if __name__ == "__main__":
    main()
