#!/usr/bin/env python3
"""fixtures_stage.py - the tiny-a fixtures as the GPU carry takes them (bench/gpu.sh pack).

  python3 bench/fixtures_stage.py TINY_A_COPY COSMOS3_BIN

Rewrites a writable copy of tiny-a in place so that it travels in a few MB:
lm_head.weight (a shard of its own, never loaded by the engine) goes, and
embed_tokens.weight [151936, 64] becomes the sparse embedding the engine also
reads (embed_tokens.rows [n, 64] + embed_tokens.ids [n], the shipped demo
model's form) with the rows of every id the goldens use: the ids stored in the
golden JSON files and those `cosmos3 tokenize` gives for the conditioned cases'
prompts (both system-prompt settings, with the templates). Ids without a row
read a zero row, so the goldens' numbers are unchanged: `COSMOS3_FIXTURES=`
the staged folder's parent passes the CPU golden tests (model, vae, e2e, cond,
cond_e2e, distilled, fp8, cli_fixtures)."""
import json
import os
import struct
import subprocess
import sys


def golden_ids(root):
    ids = set()

    def walk(x, key=""):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                if isinstance(v, int) and (key.endswith("ids") or key == "pipeline_appends"):
                    ids.add(v)
                else:
                    walk(v, key)
        elif isinstance(x, int) and key.endswith("_id"):
            ids.add(x)

    for rel in ("golden/tokenization.json", "golden/manifest.json", "cond/cond_manifest.json"):
        p = os.path.join(root, rel)
        if os.path.exists(p):
            walk(json.load(open(p)))
    return ids


def case_ids(root, binary):
    """The ids of the conditioned cases' prompts, as the engine builds them."""
    p = os.path.join(root, "cond/cond_manifest.json")
    ids = set()
    if not os.path.exists(p):
        return ids
    model = os.path.join(root, "model")
    for case in json.load(open(p))["cases"].values():
        if "prompt" not in case:
            continue
        size = ["-W", str(case.get("width", 64)), "-H", str(case.get("height", 64)),
                "-F", str(case.get("num_frames", 1)), "--fps", str(case.get("fps", 24))]
        for neg in (False, True):
            text = (case.get("negative_prompt") if neg else case["prompt"]) or ""
            for sysp in ("on", "off"):
                r = subprocess.run([binary, "tokenize", "-m", model, "--templates", "--system-prompt", sysp]
                                   + size + (["--negative"] if neg else []) + ["--", text],
                                   capture_output=True, text=True, check=True)
                ids.update(int(x) for x in r.stdout.split())
    return ids


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def write_st(path, tensors, meta):
    """tensors: (name, dtype, shape, bytes) in order"""
    h, off = ({"__metadata__": meta} if meta else {}), 0
    for name, dt, shape, data in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for t in tensors:
            f.write(t[3])


def main():
    root, binary = sys.argv[1], sys.argv[2]
    d = os.path.join(root, "model/transformer")
    ip = os.path.join(d, "diffusion_pytorch_model.safetensors.index.json")
    idx = json.load(open(ip))
    wm = idx["weight_map"]
    lm = wm.pop("lm_head.weight", None)
    if lm and lm not in wm.values():
        os.remove(os.path.join(d, lm))
    shard = wm.pop("embed_tokens.weight")
    sp = os.path.join(d, shard)
    h, data = read_st(sp)
    meta = h.pop("__metadata__", None)
    ids = golden_ids(root) | case_ids(root, binary)
    out = []
    for name, t in h.items():
        a, b = t["data_offsets"]
        if name != "embed_tokens.weight":
            out.append((name, t["dtype"], t["shape"], data[a:b]))
            continue
        vocab, dim = t["shape"]
        row = dim * {"BF16": 2, "F16": 2, "F32": 4}[t["dtype"]]
        keep = sorted(i for i in ids if 0 <= i < vocab)
        out.append(("embed_tokens.rows", t["dtype"], [len(keep), dim],
                    b"".join(data[a + i * row:a + (i + 1) * row] for i in keep)))
        out.append(("embed_tokens.ids", "I32", [len(keep)], struct.pack("<%di" % len(keep), *keep)))
        print("fixtures_stage: %d of %d embedding rows kept, lm_head dropped" % (len(keep), vocab))
    write_st(sp, out, meta)
    wm["embed_tokens.rows"] = wm["embed_tokens.ids"] = shard
    json.dump(idx, open(ip, "w"), indent=2)


if __name__ == "__main__":
    main()
