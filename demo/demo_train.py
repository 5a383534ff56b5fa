#!/usr/bin/env python3
"""demo_train.py - train the built-in demo model (issue 13) from scratch.

A Cosmos3 of the exact architecture at toy size (the `demo` preset of
`cosmos3 mkmodel`: hidden 256, head_dim 32, 8 / 4 heads, 4 layers per tower,
SwiGLU 768, mRoPE [8,4,4]; Wan2.2 VAE at base 16), trained on the synthetic
world of demo/demo_world.md, drawn on the GPU every step. The model is the
one in bench/reference/torch_ref.py (imported, not restated).

  python3 demo/demo_train.py all   --work DIR          every stage below, in order
  python3 demo/demo_train.py vae   --work DIR          1: VAE (encoder + decoder)        -> DIR/vae.pt
  python3 demo/demo_train.py dit   --work DIR          2: latents + transformer          -> DIR/dit.pt
  python3 demo/demo_train.py score --work DIR          3: sample + judge, guidance sweep -> DIR/scores.json
  python3 demo/demo_train.py pack  --work DIR --to D   4: Diffusers checkpoint (DIR/diffusers) and the
                                                           shipped form (D, e.g. share/models/demo)
  python3 demo/demo_train.py bench --work DIR          PyTorch sampler: s per 64x64 image (batch 1)
  python3 demo/demo_train.py check --work DIR          the C engine vs this forward on the shipped weights

Pictures and 9-frame clips (demo/demo_world.md "Clips": five motions): the
VAE learns both (the clips through the causal time chunks the engine runs);
the transformer learns text-to-image, text-to-video, image-to-video (latent
frame 0 pinned: clean, no timestep, its velocity zero in the loss, as the
engine samples) and video-to-video (latent frames 0 and 1 pinned). `score`
judges pictures and clips (demo/demo_judge.c, demo_judge_clip), `check`
compares the C engine on pictures and on --image / --video clips. --smoke:
every stage with a handful of steps and tiny batches (proves the code first).

Each stage reads the previous one's file, so a failed command costs one stage.
Needs: torch (CUDA for speed; the CPU works at toy step counts), the cosmos3
binary (--cosmos3: mkmodel for the layout, tokenize for the prompt ids exactly
as the pipeline builds them) and the judge library (--judge:
libdemojudge.so from tests/). Seeded (--seed); logs loss and steps/s.

Recipe (issue 13): VAE with L1 + L2, object pixels and a 2-px band around
them weighted x10, latents mu + 0.1 std(mu) eps, a 1e-4 mu^2/2 penalty;
transformer by flow matching (x_s = (1-s) x0 + s eps, target eps - x0,
t = 1000 s, s half uniform, half logit-normal), AdamW 8e-4, batch 512,
warm-up 200, cosine decay, clip 1, EMA 0.999, 10 % of captions replaced by
the negative prompt; embedding rows of ids no caption uses stay zero. Whole
steps (data, forward, backward, clip, AdamW, EMA) run as CUDA graphs.
"""
import argparse
import ctypes
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "reference"))
import torch_ref as R  # noqa: E402

# ------------------------------------------------------------- the world

SHAPES = ("circle", "square", "triangle")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
PALETTE = ((215, 25, 35), (30, 170, 50), (40, 70, 220), (250, 225, 40), (140, 50, 170), (245, 130, 20),
           (245, 245, 245), (20, 20, 20))
PLACES = ("in the center", "on the left", "on the right", "at the top", "at the bottom")
PLACE_DX, PLACE_DY = (0, -10, 10, 0, 0), (0, 0, 0, -10, 10)
SIZE = 64
# Held out of all training: every shape and every colour (as object and as
# background) among them. tests/test_demo.c scores the same combinations.
HELD_OUT = (("circle", "red", "blue"), ("circle", "yellow", "black"), ("circle", "white", "purple"),
            ("square", "green", "orange"), ("square", "purple", "white"), ("square", "black", "yellow"),
            ("triangle", "blue", "red"), ("triangle", "orange", "green"), ("triangle", "red", "white"))
N_PLACE_OPT = 1 + len(PLACES)  # caption without a place phrase, then one per place
# Clips (demo/demo_world.md "Clips"): 9 frames, the object at the centre place
# moving MOTION_STEP px a frame, from 8 px before the centre to 8 px after it.
MOTIONS = ("not moving", "moving to the right", "moving to the left", "moving up", "moving down")
MOTION_DX, MOTION_DY = (0, 1, -1, 0, 0), (0, 0, 0, -1, 1)
CLIP_FRAMES, MOTION_STEP, CLIP_T = 9, 2, 3  # frames, px a frame, latent frames
# The tasks on clips: how many leading latent frames are given (pinned):
# text-to-video none, image-to-video frame 0 (the picture), video-to-video
# 0 and 1 (the first 5 frames; the engine's default --condition-frames 0,1).
TASKS = ("t2v", "i2v", "v2v")
FPS = 24.0


def combos():
    """All (shape, colour, bg) index triples; held-out flags."""
    out, held = [], []
    hs = {(SHAPES.index(a), COLOURS.index(b), COLOURS.index(c)) for a, b, c in HELD_OUT}
    for s in range(3):
        for c in range(8):
            for b in range(8):
                if c != b:
                    out.append((s, c, b))
                    held.append((s, c, b) in hs)
    return out, held


def caption(s, c, b, place):
    """place -1: no place phrase."""
    t = f"a {COLOURS[c]} {SHAPES[s]} on a {COLOURS[b]} background"
    return t + (f", {PLACES[place]}" if place >= 0 else "")


def clip_caption(s, c, b, motion):
    return f"a {COLOURS[c]} {SHAPES[s]} on a {COLOURS[b]} background, {MOTIONS[motion]}"


_CONSTS = {}


def consts(dev):
    if str(dev) not in _CONSTS:  # made once (no host copies inside a CUDA graph)
        _CONSTS[str(dev)] = dict(
            pal=torch.tensor(PALETTE, dtype=torch.float32, device=dev) / 127.5 - 1,
            pdx=torch.tensor(PLACE_DX, device=dev), pdy=torch.tensor(PLACE_DY, device=dev),
            p=torch.arange(SIZE, device=dev, dtype=torch.float32) + 0.5,
            mdx=torch.tensor(MOTION_DX, device=dev), mdy=torch.tensor(MOTION_DY, device=dev),
            fk=(torch.arange(CLIP_FRAMES, device=dev) - (CLIP_FRAMES - 1) // 2) * MOTION_STEP,
            tidx=torch.arange(CLIP_T, device=dev))
    return _CONSTS[str(dev)]


def render(sh, col, bg, cx, cy, r, dev):
    """N pictures exactly as demo/demo_world.c: shape, colour, bg, centre and
    size [N] -> images [N, 3, 64, 64] in [-1, 1] and object masks [N, 64, 64]."""
    k = consts(dev)
    pal, p = k["pal"], k["p"]
    cx, cy, r = (t.float()[:, None, None] for t in (cx, cy, r))
    dx, dy = p[None, None, :] - cx, p[None, :, None] - cy
    circle = dx * dx + dy * dy <= r * r
    square = (dx.abs() <= r) & (dy.abs() <= r)
    tri = (dy >= -r) & (dy <= r) & (dx.abs() <= (dy + r) / 2)
    sh = sh[:, None, None]
    mask = torch.where(sh == 0, circle, torch.where(sh == 1, square, tri))
    img = torch.where(mask[:, None], pal[col][:, :, None, None], pal[bg][:, :, None, None])
    return img, mask


def draw(attr, geo, dev):
    """Render a batch exactly as demo/demo_world.c: attr [B, 4] (shape, colour,
    bg, place), geo [B, 3] (size, jitter x, jitter y) -> images [B, 3, 64, 64]
    in [-1, 1] and the object mask [B, 64, 64]."""
    k = consts(dev)
    cx = 32 + k["pdx"][attr[:, 3]] + geo[:, 1]
    cy = 32 + k["pdy"][attr[:, 3]] + geo[:, 2]
    return render(attr[:, 0], attr[:, 1], attr[:, 2], cx, cy, geo[:, 0], dev)


def draw_clip(attr, geo, dev):
    """Clips as demo_render_clip: attr [B, 4] (shape, colour, bg, motion), geo
    [B, 3] (size, jitter x, jitter y; the centre place) -> clips [B, 3, 9, 64,
    64] in [-1, 1] and masks [B, 9, 64, 64]."""
    k = consts(dev)
    B, Fr = attr.shape[0], CLIP_FRAMES
    cx = (32 + geo[:, 1])[:, None] + k["mdx"][attr[:, 3]][:, None] * k["fk"][None]  # [B, 9]
    cy = (32 + geo[:, 2])[:, None] + k["mdy"][attr[:, 3]][:, None] * k["fk"][None]
    rep = lambda t: t[:, None].expand(B, Fr).reshape(-1)
    img, mask = render(rep(attr[:, 0]), rep(attr[:, 1]), rep(attr[:, 2]), cx.reshape(-1), cy.reshape(-1),
                       rep(geo[:, 0]), dev)
    return img.view(B, Fr, 3, SIZE, SIZE).transpose(1, 2), mask.view(B, Fr, SIZE, SIZE)


def random_batch(B, combo_t, dev):
    """B random pictures from the allowed combinations combo_t [K, 3]."""
    k = torch.randint(0, combo_t.shape[0], (B,), device=dev)
    place = torch.randint(0, 5, (B,), device=dev)
    attr = torch.cat([combo_t[k], place[:, None]], 1)
    geo = torch.stack([torch.randint(10, 16, (B,), device=dev), torch.randint(-2, 3, (B,), device=dev),
                       torch.randint(-2, 3, (B,), device=dev)], 1)
    return attr, geo, k


def random_clips(B, combo_t, dev, gen=None):
    """B random clips from the allowed combinations: attr (shape, colour, bg,
    motion), geo (size, jitter x, jitter y), the combination index."""
    ri = lambda lo, hi: torch.randint(lo, hi, (B,), generator=gen, device="cpu" if gen else dev).to(dev)
    k = ri(0, combo_t.shape[0])
    motion = ri(0, len(MOTIONS))
    attr = torch.cat([combo_t[k], motion[:, None]], 1)
    geo = torch.stack([ri(10, 16), ri(-2, 3), ri(-2, 3)], 1)
    return attr, geo, k


def to_uint8(img):
    """[B, 3, H, W] in [-1, 1] -> [B, H, W, 3] uint8 (as the C engine rounds);
    clips [B, 3, F, H, W] -> [B, F, H, W, 3]."""
    u = ((img.float().clamp(-1, 1) + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
    return u.permute(0, 2, 3, 4, 1) if u.dim() == 5 else u.permute(0, 2, 3, 1)


class Judge:
    """demo/demo_judge.c through ctypes: the tests' own judge."""

    class Verdict(ctypes.Structure):
        _fields_ = [("bg", ctypes.c_int), ("colour", ctypes.c_int), ("shape", ctypes.c_int),
                    ("place", ctypes.c_int), ("cx", ctypes.c_float), ("cy", ctypes.c_float),
                    ("fill", ctypes.c_float), ("taper", ctypes.c_float), ("area", ctypes.c_int)]

    class ClipVerdict(ctypes.Structure):
        _fields_ = [("bg", ctypes.c_int), ("colour", ctypes.c_int), ("shape", ctypes.c_int),
                    ("frames_found", ctypes.c_int), ("consistent", ctypes.c_int), ("motion", ctypes.c_int),
                    ("step_x", ctypes.c_float), ("step_y", ctypes.c_float), ("start_dist", ctypes.c_float)]

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.demo_judge.argtypes = [ctypes.c_void_p, ctypes.POINTER(Judge.Verdict)]
        self.lib.demo_judge_clip.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(Judge.Verdict),
                                             ctypes.POINTER(Judge.ClipVerdict)]

    def clips(self, frames, ref=None):
        """frames [B, F, 64, 64, 3] uint8, ref [B, 64, 64, 3] (the given first
        picture, image-/video-to-video) or None -> list of dicts (bg, colour,
        shape, motion, start_dist, consistent, frames_found)."""
        frames = frames.cpu().contiguous()
        ref = None if ref is None else ref.cpu().contiguous()
        B, Fr = frames.shape[:2]
        n = 64 * 64 * 3
        out, v, cv = [], Judge.Verdict(), Judge.ClipVerdict()
        for i in range(B):
            rp = None
            if ref is not None:
                self.lib.demo_judge(ctypes.c_void_p(ref.data_ptr() + i * n), ctypes.byref(v))
                rp = ctypes.byref(v)
            self.lib.demo_judge_clip(ctypes.c_void_p(frames.data_ptr() + i * Fr * n), Fr, rp, ctypes.byref(cv))
            out.append(dict(bg=cv.bg, colour=cv.colour, shape=cv.shape, motion=cv.motion,
                            start_dist=float(cv.start_dist), consistent=cv.consistent,
                            frames_found=cv.frames_found))
        return out

    def __call__(self, rgb):
        """rgb [B, 64, 64, 3] uint8 -> list of (bg, colour, shape, place)."""
        rgb = rgb.cpu().contiguous()
        out, v, n = [], Judge.Verdict(), 64 * 64 * 3
        for i in range(rgb.shape[0]):
            self.lib.demo_judge(ctypes.c_void_p(rgb.data_ptr() + i * n), ctypes.byref(v))
            out.append((v.bg, v.colour, v.shape, v.place))
        return out


# ------------------------------------------------------ flat parameters

class Flat:
    """Every trainable tensor as a view of one fp32 buffer: one gradient,
    one AdamW, one EMA, all graph-safe (lr is a device tensor)."""

    def __init__(self, shapes, dev):
        self.names = list(shapes)
        self.shapes = {k: tuple(v) for k, v in shapes.items()}
        self.off, n = {}, 0
        for k in self.names:
            self.off[k] = n
            n += math.prod(self.shapes[k])
        self.p = torch.zeros(n, device=dev, requires_grad=True)
        self.n = n

    def views(self, src=None, dtype=None):
        src = self.p if src is None else src
        if dtype is not None:
            src = src.to(dtype)
        return {k: src[self.off[k]:self.off[k] + math.prod(s)].view(s) for k, s in self.shapes.items()}

    def set(self, k, t):
        with torch.no_grad():
            self.p[self.off[k]:self.off[k] + t.numel()] = t.reshape(-1).to(self.p)

    def state(self, src=None):
        return {k: v.detach().clone().cpu() for k, v in self.views(src).items()}


class AdamW:
    def __init__(self, flat, lr, wd_mask, betas=(0.9, 0.99), eps=1e-8, wd=0.01, clip=1.0, ema=None):
        self.f, self.b1, self.b2, self.eps, self.wd, self.clip = flat, betas[0], betas[1], eps, wd, clip
        dev = flat.p.device
        self.m = torch.zeros(flat.n, device=dev)
        self.v = torch.zeros(flat.n, device=dev)
        self.t = torch.zeros((), device=dev)
        self.lr = torch.full((), lr, device=dev)
        self.wd_mask = wd_mask
        self.gnorm = torch.zeros((), device=dev)
        self.ema_decay = ema
        self.ema = flat.p.detach().clone() if ema else None

    @torch.no_grad()
    def step(self):
        p, g = self.f.p, self.f.p.grad
        self.gnorm.copy_(g.norm())
        g.mul_((self.clip / (self.gnorm + 1e-6)).clamp(max=1.0))
        self.t.add_(1)
        self.m.lerp_(g, 1 - self.b1)
        self.v.mul_(self.b2).addcmul_(g, g, value=1 - self.b2)
        mh = self.m / (1 - torch.pow(self.b1, self.t))
        vh = self.v / (1 - torch.pow(self.b2, self.t))
        p.mul_(1 - self.lr * self.wd * self.wd_mask)
        p.sub_(self.lr * mh / (vh.sqrt() + self.eps))
        if self.ema is not None:
            self.ema.lerp_(p, 1 - self.ema_decay)


def lr_at(base, warm, frac, floor=0.05):
    """Linear warm-up (steps) then cosine to floor * base over frac in [0, 1]."""
    return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


class Stepper:
    """Runs fn() (a whole training step) eagerly or as one CUDA graph."""

    def __init__(self, fn, flat, graph):
        self.fn, self.flat, self.g = fn, flat, None
        if graph:
            try:
                self._capture(fn, flat)
            except Exception as e:  # keep training, eagerly (slower), rather than lose the run
                print(f"CUDA graph capture failed ({type(e).__name__}: {e}); running eagerly", flush=True)
                self.g = None
                torch.cuda.synchronize()

    def _capture(self, fn, flat):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up (cuBLAS / cuDNN choices) off the capture
            for _ in range(3):
                flat.p.grad = None
                fn()
        torch.cuda.current_stream().wait_stream(s)
        flat.p.grad = None
        self.g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.g):
            self.out = fn()

    def __call__(self):
        if self.g is not None:
            self.g.replay()
            return self.out
        self.flat.p.grad = None
        return self.fn()


# ------------------------------------------------------------------ VAE

def vae_init(flat, gen):
    """Conv weights N(0, 1/fan_in) on the kernel's last time slice (the only
    one a single frame reads), the earlier time slices zero (a clip starts as
    its frames one by one), the temporal down/upsamplers' time_conv the
    identity on the last slice, resnet conv2 / attention proj zero (blocks
    start as identities), gammas 1, biases 0."""
    for k in flat.names:
        s = flat.shapes[k]
        if k.endswith(".gamma"):
            flat.set(k, torch.ones(s))
        elif k.endswith(".bias"):
            flat.set(k, torch.zeros(s))
        elif ".time_conv." in k:  # [Co, Ci, 3, 1, 1], Co = Ci (encoder) or 2 Ci (decoder: two frames)
            w = torch.zeros(s)
            for o in range(s[0]):
                w[o, o % s[1], -1] = 1
            flat.set(k, w)
        elif ".conv2." in k or k.endswith("attentions.0.proj.weight"):
            flat.set(k, torch.zeros(s))
        else:
            fan = s[1] * (s[-1] * s[-2] if len(s) >= 4 else 1)
            w = torch.randn(s, generator=gen) / math.sqrt(fan)
            if len(s) == 5 and s[2] > 1:
                w[:, :, :-1] = 0
            flat.set(k, w)


def band(mask, px=2):
    """The object and a px-wide band around it (weighted x10 in the loss): [B, 1, H, W]."""
    return F.max_pool2d(mask.float()[:, None], 2 * px + 1, 1, px) > 0


def stage_vae(a, dev):
    W = a.work
    skel = skeleton(a)
    vcfg = json.load(open(os.path.join(skel, "vae", "config.json")))
    names = R.load_folder_tensors(os.path.join(skel, "vae"))
    flat = Flat({k: v.shape for k, v in names.items()}, dev)
    gen = torch.Generator().manual_seed(a.seed)
    vae_init(flat, gen)
    torch.manual_seed(a.seed)
    cmb, held = combos()
    train_t = torch.tensor([c for c, h in zip(cmb, held) if not h], device=dev)
    wd_mask = torch.zeros(flat.n, device=dev)
    opt = AdamW(flat, a.vae_lr, wd_mask, betas=(0.9, 0.99), wd=0.0, clip=1.0)
    B, Bc = a.vae_batch, a.vae_clip_batch
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32

    def recon(vae, x, mask):
        """x [N, 3, F, 64, 64], mask [N, F, 64, 64] -> weighted loss, MSE."""
        N, _, Fr, H, W = x.shape
        mu, _ = vae.encode_batch(x)
        mu = mu.float()
        z = mu + 0.1 * mu.detach().std() * torch.randn_like(mu)
        rec = vae.decode_raw(z).float()
        wgt = 1 + 9 * band(mask.reshape(N * Fr, H, W)).float().view(N, Fr, 1, H, W).transpose(1, 2)
        d = rec - x
        return (wgt * (d.abs() + d * d)).mean() + a.vae_mu_penalty * 0.5 * (mu * mu).mean(), (d * d).mean()

    def step():
        vae = R.WanVAE(vcfg, flat.views(dtype=dt), dev, dt)
        attr, geo, _ = random_batch(B, train_t, dev)
        img, mask = draw(attr, geo, dev)
        li, mi = recon(vae, img[:, :, None], mask[:, None])
        # clips: the temporal path (causal chunks: 9 frames -> 3 latent frames and back)
        cattr, cgeo, _ = random_clips(Bc, train_t, dev)
        clip, cmask = draw_clip(cattr, cgeo, dev)
        lc, mc = recon(vae, clip, cmask)
        loss = li + a.vae_clip_weight * lc
        loss.backward()
        opt.step()
        return loss.detach(), mi.detach(), mc.detach()

    run = Stepper(step, flat, a.graph and dev.type == "cuda")
    t0, steps, log = time.time(), 0, []
    while steps < a.vae_steps and time.time() - t0 < a.vae_seconds:
        frac = max(steps / a.vae_steps, (time.time() - t0) / a.vae_seconds)
        opt.lr.fill_(lr_at(a.vae_lr, 100, frac) * min(1.0, (steps + 1) / 100))
        loss, mse, msec = run()
        steps += 1
        if steps % 250 == 0 or steps == 1:
            el = time.time() - t0
            psnr = 10 * math.log10(4 / max(float(mse), 1e-12))
            psnrc = 10 * math.log10(4 / max(float(msec), 1e-12))
            log.append(dict(step=steps, s=round(el, 1), loss=float(loss), psnr=round(psnr, 2),
                            psnr_clips=round(psnrc, 2)))
            print(f"vae step {steps:6d} {el:6.1f} s  loss {float(loss):.5f}  PSNR {psnr:5.2f} dB (clips "
                  f"{psnrc:5.2f} dB)  {steps / max(el, 1e-9):6.1f} steps/s", flush=True)
    el = time.time() - t0
    # reconstructions of held-out pictures, judged
    with torch.no_grad():
        judge = Judge(a.judge) if a.judge else None
        held_t = torch.tensor([c for c, h in zip(cmb, held) if h], device=dev)
        attr, geo, _ = random_batch(512, held_t, dev)
        img, _ = draw(attr, geo, dev)
        vae = R.WanVAE(vcfg, flat.views(dtype=dt), dev, dt)
        mu, _ = vae.encode_batch(img[:, :, None])
        rec = vae.decode_raw(mu.float())[:, :, 0].float().clamp(-1, 1)
        psnr = 10 * math.log10(4 / float(((rec - img) ** 2).mean()))
        ok = okc = None
        if judge:
            v = judge(to_uint8(rec))
            at = attr.cpu().tolist()
            ok = sum(1 for x, y in zip(v, at) if x == (y[2], y[1], y[0], y[3])) / len(v)
        # held-out clips: reconstructed, judged as clips (object and motion)
        cattr, cgeo, _ = random_clips(128, held_t, dev)
        clip, _ = draw_clip(cattr, cgeo, dev)
        mu, _ = vae.encode_batch(clip)
        crec = vae.decode_raw(mu.float()).float().clamp(-1, 1)
        psnrc = 10 * math.log10(4 / float(((crec - clip) ** 2).mean()))
        if judge:
            cv = judge.clips(to_uint8(crec))
            at = cattr.cpu().tolist()
            okc = sum(1 for x, y in zip(cv, at) if (x["bg"], x["colour"], x["shape"], x["motion"]) ==
                      (y[2], y[1], y[0], y[3])) / len(cv)
    pc = lambda x: x if x is None else round(100 * x, 1)
    print(f"vae: {steps} steps in {el:.1f} s ({steps / el:.1f} steps/s); held-out reconstructions PSNR "
          f"{psnr:.2f} dB, judged all-right {pc(ok)} %; held-out clips PSNR {psnrc:.2f} dB, judged all-right "
          f"(object and motion) {pc(okc)} %", flush=True)
    torch.save(dict(weights=flat.state(), cfg=vcfg, steps=steps, seconds=el, log=log, psnr=psnr, judged=ok,
                    psnr_clips=psnrc, judged_clips=okc), os.path.join(W, "vae.pt"))


# ---------------------------------------------------------- transformer

def skeleton(a):
    """The demo preset's layout, configs and tensor names from cosmos3 mkmodel."""
    d = os.path.join(a.work, "skeleton")
    if not os.path.exists(os.path.join(d, "model_index.json")):
        subprocess.run([a.cosmos3, "mkmodel", "--preset", "demo", "--seed", str(a.seed), "-o", d, "--overwrite",
                        "-q"], check=True)
    return d


def prompt_table(a, skel, video=False):
    """Token ids of every caption (combination x place option; video: x
    motion) and of the negative prompt, exactly as `cosmos3 gen` builds them
    at 64x64 (video: 9 frames at 24 fps, the video templates)."""
    cmb, _ = combos()
    if video:
        texts = [clip_caption(s, c, b, m) for (s, c, b) in cmb for m in range(len(MOTIONS))]
    else:
        texts = [caption(s, c, b, p - 1) for (s, c, b) in cmb for p in range(N_PLACE_OPT)]
    base = [a.cosmos3, "tokenize", "-m", skel, "--templates", "-W", str(SIZE), "-H", str(SIZE)]
    if video:
        base += ["-F", str(CLIP_FRAMES), "--fps", str(int(FPS))]
    out = subprocess.run(base + ["--lines", "-"], input="\n".join(texts) + "\n", capture_output=True, text=True,
                         check=True).stdout.split("\n")
    ids = [[int(x) for x in line.split()] for line in out if line.strip()]
    neg = subprocess.run(base + ["--negative", ""], capture_output=True, text=True, check=True).stdout.split()
    assert len(ids) == len(texts)
    return texts, ids, [int(x) for x in neg]


def dit_init(flat, gen, layers):
    for k in flat.names:
        s = flat.shapes[k]
        if k.endswith("norm.weight") or "layernorm" in k or ".norm_" in k or k.startswith("norm"):
            flat.set(k, torch.ones(s))
        elif k.endswith(".bias") or k.startswith("proj_out."):
            flat.set(k, torch.zeros(s))
        elif k.startswith("embed_rows"):
            flat.set(k, torch.randn(s, generator=gen) * 0.02)
        elif k.startswith("time_embedder") or k.startswith("proj_in"):
            flat.set(k, torch.randn(s, generator=gen) / math.sqrt(s[1]))
        else:
            std = 0.02 / (math.sqrt(2 * layers) if any(x in k for x in ("to_out", "to_add_out", "down_proj")) else 1)
            flat.set(k, torch.randn(s, generator=gen) * std)


def load_vae(W, dev, dt):
    st = torch.load(os.path.join(W, "vae.pt"))
    return R.WanVAE(st["cfg"], {k: v.to(dev) for k, v in st["weights"].items()}, dev, dt), st


def stage_dit(a, dev):
    W = a.work
    skel = skeleton(a)
    tcfg = json.load(open(os.path.join(skel, "transformer", "config.json")))
    c = R.TConfig(tcfg)
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    torch.manual_seed(a.seed + 1)
    cmb, held = combos()
    texts, ids, neg = prompt_table(a, skel)
    vtexts, vids, vneg = prompt_table(a, skel, video=True)
    # embedding rows: only the ids some prompt uses (sorted), remapped
    used = sorted({t for r in ids + vids for t in r} | set(neg) | set(vneg))
    remap = {t: i for i, t in enumerate(used)}
    Lm = max(max(len(r) for r in ids + vids), len(neg), len(vneg))  # one padded length: one UND batch
    pad = lambda r: [remap[t] for t in r] + [0] * (Lm - len(r))
    cap_ids = torch.tensor([pad(r) for r in ids], device=dev)
    cap_len = torch.tensor([len(r) for r in ids], device=dev)
    neg_ids, neg_len = torch.tensor(pad(neg), device=dev), torch.tensor(len(neg), device=dev)
    vcap_ids = torch.tensor([pad(r) for r in vids], device=dev)
    vcap_len = torch.tensor([len(r) for r in vids], device=dev)
    vneg_ids, vneg_len = torch.tensor(pad(vneg), device=dev), torch.tensor(len(vneg), device=dev)
    # 1. latents of a bank of training pictures and clips
    vae, vst = load_vae(W, dev, dt)
    train_idx = [i for i, h in enumerate(held) if not h]
    train_t = torch.tensor([cmb[i] for i in train_idx], device=dev)
    train_k = torch.tensor(train_idx, device=dev)
    t0 = time.time()
    zs, attrs, ks = [], [], []
    zc, cattrs, cks = [], [], []
    with torch.no_grad():
        nb_i, nb_c = min(2048, a.bank), min(256, a.clip_bank)
        for _ in range(max(1, a.bank // nb_i)):
            attr, geo, k = random_batch(nb_i, train_t, dev)
            img, _ = draw(attr, geo, dev)
            mu, _ = vae.encode_batch(img[:, :, None])
            zs.append(mu.float())
            attrs.append(attr)
            ks.append(train_k[k])
        for _ in range(max(1, a.clip_bank // nb_c)):
            attr, geo, k = random_clips(nb_c, train_t, dev)
            clip, _ = draw_clip(attr, geo, dev)
            mu, _ = vae.encode_batch(clip)
            zc.append(mu.float())
            cattrs.append(attr)
            cks.append(train_k[k])
    z, zv = torch.cat(zs), torch.cat(zc)  # [N, 48, 1, 4, 4], [M, 48, 3, 4, 4]
    allz = torch.cat([z.transpose(0, 1).reshape(z.shape[1], -1), zv.transpose(0, 1).reshape(zv.shape[1], -1)], 1)
    mean, std = allz.mean(1), allz.std(1)  # per channel, over pictures and every latent frame of the clips
    nrm = lambda x: ((x - mean[None, :, None, None, None]) / std[None, :, None, None, None]).to(dt)
    bank, cbank = nrm(z), nrm(zv)
    del allz, z, zv
    bank_attr, bank_k = torch.cat(attrs), torch.cat(ks)
    cbank_attr, cbank_k = torch.cat(cattrs), torch.cat(cks)
    print(f"latents: {bank.shape[0]} pictures and {cbank.shape[0]} clips encoded in {time.time() - t0:.1f} s; "
          f"per-channel std {float(std.min()):.3f}..{float(std.max()):.3f}", flush=True)
    # 2. the transformer
    names = R.load_folder_tensors(os.path.join(skel, "transformer"))
    shapes = {k: v.shape for k, v in names.items() if k != "embed_tokens.weight"}
    shapes["embed_rows"] = (len(used), c.D)
    del names
    flat = Flat(shapes, dev)
    dit_init(flat, torch.Generator().manual_seed(a.seed + 2), c.layers)
    wd_mask = torch.zeros(flat.n, device=dev)
    for k in flat.names:
        if len(flat.shapes[k]) == 2 and k != "embed_rows":
            wd_mask[flat.off[k]:flat.off[k] + math.prod(flat.shapes[k])] = 1
    opt = AdamW(flat, a.dit_lr, wd_mask, betas=(0.9, 0.99), wd=0.01, clip=1.0, ema=0.999)
    Bv = int(round(a.dit_batch * a.dit_video_frac))
    Bi = a.dit_batch - Bv
    half = torch.arange(Bi, device=dev) < Bi // 2
    halfv = torch.arange(Bv, device=dev) < Bv // 2
    tidx = consts(dev)["tidx"]
    # task mix on clips: t2v, i2v, v2v (cumulative thresholds)
    tw = [float(x) for x in a.task_mix.split(",")]
    th = torch.tensor([sum(tw[:i + 1]) / sum(tw) for i in range(len(tw) - 1)], device=dev)
    nM = len(MOTIONS)

    def model_from(src):
        w = flat.views(src, dtype=dt)
        w["embed_tokens.weight"] = w.pop("embed_rows")
        for k in ("time_embedder.linear_1.weight", "time_embedder.linear_1.bias", "time_embedder.linear_2.weight",
                  "time_embedder.linear_2.bias"):
            w[k] = flat.views(src)[k]
        return R.Cosmos3(c, w, dev, dt)

    def step():
        # pictures: text-to-image
        i = torch.randint(0, bank.shape[0], (Bi,), device=dev)
        x0 = bank[i].float()
        attr = bank_attr[i]
        with_place = torch.rand(Bi, device=dev) < 0.5
        cap = bank_k[i] * N_PLACE_OPT + torch.where(with_place, attr[:, 3] + 1, torch.zeros_like(attr[:, 3]))
        isneg = torch.rand(Bi, device=dev) < 0.1
        idb = torch.where(isneg[:, None], neg_ids[None], cap_ids[cap])
        lens = torch.where(isneg, neg_len, cap_len[cap])
        s = torch.where(half, torch.rand(Bi, device=dev), torch.sigmoid(torch.randn(Bi, device=dev)))
        eps = torch.randn_like(x0)
        sb = s[:, None, None, None, None]
        xs = (1 - sb) * x0 + sb * eps
        # clips: text-to-video, image-to-video (latent frame 0 given), video-to-video (0 and 1)
        j = torch.randint(0, cbank.shape[0], (Bv,), device=dev)
        x0v = cbank[j].float()
        capv = cbank_k[j] * nM + cbank_attr[j][:, 3]
        isnegv = torch.rand(Bv, device=dev) < 0.1
        idv = torch.where(isnegv[:, None], vneg_ids[None], vcap_ids[capv])
        lensv = torch.where(isnegv, vneg_len, vcap_len[capv])
        task = (torch.rand(Bv, device=dev)[:, None] >= th[None]).sum(1)  # 0 t2v, 1 i2v, 2 v2v
        noisy = tidx[None, :] >= task[:, None]  # [Bv, T]: the frames before `task` are pinned
        nb = noisy[:, None, :, None, None]
        sv = torch.where(halfv, torch.rand(Bv, device=dev), torch.sigmoid(torch.randn(Bv, device=dev)))
        epsv = torch.randn_like(x0v)
        sbv = sv[:, None, None, None, None]
        xsv = torch.where(nb, (1 - sbv) * x0v + sbv * epsv, x0v)  # pinned frames clean
        m = model_from(None)
        kv = m.und_batch(torch.cat([idb, idv]))
        kvi = [(k[:Bi], v[:Bi]) for k, v in kv]
        kvv = [(k[Bi:], v[Bi:]) for k, v in kv]
        v = m.gen_batch(kvi, xs, 1000 * s, FPS, lens=lens)
        loss_i = F.mse_loss(v.float(), eps - x0)
        vv = m.gen_batch(kvv, xsv, 1000 * sv, FPS, lens=lensv, noisy=noisy)  # pinned velocity zero
        nf = nb.float()
        per = x0v.shape[1] * x0v.shape[3] * x0v.shape[4]
        loss_v = (((vv.float() - (epsv - x0v)) * nf) ** 2).sum() / (nf.sum() * per)
        loss = (Bi * loss_i + Bv * loss_v) / (Bi + Bv)
        loss.backward()
        opt.step()
        return loss.detach(), loss_i.detach(), loss_v.detach()

    run = Stepper(step, flat, a.graph and dev.type == "cuda")
    t0, steps, log = time.time(), 0, []
    while steps < a.dit_steps and time.time() - t0 < a.dit_seconds:
        frac = max(steps / a.dit_steps, (time.time() - t0) / a.dit_seconds)
        opt.lr.fill_(lr_at(a.dit_lr, 200, frac) * min(1.0, (steps + 1) / 200))
        loss, li, lv = run()
        steps += 1
        if steps % 500 == 0 or steps == 1:
            el = time.time() - t0
            log.append(dict(step=steps, s=round(el, 1), loss=float(loss), loss_t2i=float(li), loss_clips=float(lv)))
            print(f"dit step {steps:6d} {el:6.1f} s  loss {float(loss):.4f} (pictures {float(li):.4f}, clips "
                  f"{float(lv):.4f})  {steps / max(el, 1e-9):6.1f} steps/s", flush=True)
    el = time.time() - t0
    print(f"dit: {steps} steps in {el:.1f} s ({steps / el:.1f} steps/s); batch {Bi} pictures + {Bv} clips",
          flush=True)
    ema = flat.state(opt.ema)
    torch.save(dict(weights=ema, used=used, cfg=tcfg, mean=mean.cpu(), std=std.cpu(), steps=steps, seconds=el,
                    log=log, texts=texts, ids=ids, neg=neg, vtexts=vtexts, vids=vids, vneg=vneg),
               os.path.join(W, "dit.pt"))


# -------------------------------------------------------------- sampling

def load_work(W):
    """The trained weights from the stage files (EMA transformer, VAE)."""
    st, vst = torch.load(os.path.join(W, "dit.pt")), torch.load(os.path.join(W, "vae.pt"))
    sched = json.load(open(os.path.join(W, "skeleton", "scheduler", "scheduler_config.json")))
    return dict(weights=st["weights"], used=st["used"], cfg=st["cfg"], vcfg=vst["cfg"], vweights=vst["weights"],
                mean=st["mean"], std=st["std"], sched=sched, neg=st["neg"], ids=st["ids"], vids=st["vids"],
                vneg=st["vneg"])


def load_ckpt(path, a):
    """A checkpoint folder: the Diffusers layout or the shipped form (sparse
    embedding rows); prompt ids from `cosmos3 tokenize -m`."""
    j = lambda *p: json.load(open(os.path.join(path, *p)))
    w = R.load_folder_tensors(os.path.join(path, "transformer"))
    if "embed_tokens.rows" in w:
        rows, used = w.pop("embed_tokens.rows"), w.pop("embed_tokens.ids").tolist()
    else:
        full = w.pop("embed_tokens.weight")
        used = (full.float().abs().sum(1) > 0).nonzero()[:, 0].tolist()
        rows = full[used]
    w["embed_rows"] = rows
    vcfg = j("vae", "config.json")
    _, ids, neg = prompt_table(a, skeleton(a))  # the demo preset's prompt flags, its tokenizer copy
    _, vids, vneg = prompt_table(a, skeleton(a), video=True)
    return dict(weights=w, used=used, cfg=j("transformer", "config.json"), vcfg=vcfg,
                vweights=R.load_folder_tensors(os.path.join(path, "vae")),
                mean=torch.tensor(vcfg["latents_mean"]), std=torch.tensor(vcfg["latents_std"]),
                sched=j("scheduler", "scheduler_config.json"), neg=neg, ids=ids, vids=vids, vneg=vneg)


class Sampler:
    """The pipeline's T2I sampling in PyTorch: UND once per branch, UniPC,
    CFG inside the guidance interval, VAE decode (bf16 on the GPU)."""

    def __init__(self, d, dev, dt):
        self.st, self.dev, self.dt = d, dev, dt
        c = R.TConfig(d["cfg"])
        w = {k: v.to(dev) for k, v in d["weights"].items()}
        w["embed_tokens.weight"] = w.pop("embed_rows")
        self.model = R.Cosmos3(c, w, dev, dt)
        self.remap = {t: i for i, t in enumerate(d["used"])}
        self.vae = R.WanVAE(d["vcfg"], {k: v.to(dev) for k, v in d["vweights"].items()}, dev, dt)
        self.mean, self.std = d["mean"].to(dev), d["std"].to(dev)
        self.sched = d["sched"]

    def ids(self, rows):
        Lm = max(len(r) for r in rows)
        idb = torch.tensor([[self.remap[t] for t in r] + [0] * (Lm - len(r)) for r in rows], device=self.dev)
        return idb, torch.tensor([len(r) for r in rows], device=self.dev)

    @torch.no_grad()
    def latents(self, rows, noise, guidance, steps=20, shift=3.0, interval=(400, 1000), schedule="linear", x0=None):
        """rows: prompt ids per sample; noise [B, 48, T, 4, 4] -> final
        (normalised) latents. T > 1: a clip (the video negative prompt); x0
        [B, 48, k, 4, 4]: its first k latent frames given (pinned: the engine's
        mask * x0 + (1 - mask) * noise, no timestep, velocity zero)."""
        m = self.model
        B, T = len(rows), noise.shape[2]
        idc, lc = self.ids(rows)
        kvc = m.und_batch(idc)
        idu, lu = self.ids([self.st["vneg" if T > 1 else "neg"]] * B)
        kvu = m.und_batch(idu)
        sig, ts = R.sigma_schedule(self.sched, steps, schedule, shift)
        sch = R.UniPC(sig, self.sched.get("solver_order", 2))
        x = noise.float().clone()
        noisy = None
        if x0 is not None and x0.shape[2] > 0:
            k = x0.shape[2]
            x[:, :, :k] = x0.float()
            noisy = (torch.arange(T, device=self.dev) >= k)[None].expand(B, T)
        for i in range(steps):
            t = torch.full((B,), float(ts[i]), device=self.dev)
            vc = m.gen_batch(kvc, x, t, FPS, lens=lc, noisy=noisy)
            if guidance != 1 and (interval is None or interval[0] <= ts[i] <= interval[1]):
                vu = m.gen_batch(kvu, x, t, FPS, lens=lu, noisy=noisy)
                v = vu + guidance * (vc - vu)
            else:
                v = vc
            x = sch.step(v.double(), x.double()).float()
        return x

    @torch.no_grad()
    def encode(self, clip):
        """clip [B, 3, F, 64, 64] in [-1, 1] -> normalised latents [B, 48, T, 4, 4] (the encoder's mean)."""
        mu, _ = self.vae.encode_batch(clip)
        return (mu.float() - self.mean[None, :, None, None, None]) / self.std[None, :, None, None, None]

    @torch.no_grad()
    def decode_clip(self, x):
        """normalised latents [B, 48, T, 4, 4] -> uint8 [B, F, 64, 64, 3]."""
        z = x * self.std[None, :, None, None, None] + self.mean[None, :, None, None, None]
        return to_uint8(self.vae.decode_raw(z).float())

    @torch.no_grad()
    def decode(self, x):
        z = x * self.std[None, :, None, None, None] + self.mean[None, :, None, None, None]
        return to_uint8(self.vae.decode_raw(z)[:, :, 0].float())

    def __call__(self, rows, noise, guidance, **kw):
        """-> uint8 [B, 64, 64, 3]."""
        return self.decode(self.latents(rows, noise, guidance, **kw))


def score_set(sampler, judge, items, guidance, seed, **kw):
    """items: (combo, place_option) pairs; returns the per-verdict rates."""
    st = sampler.st
    cmb, _ = combos()
    rows = [st["ids"][cmb.index(cb) * N_PLACE_OPT + po] for cb, po in items]
    g = torch.Generator(device=sampler.dev).manual_seed(seed)
    noise = torch.randn(len(items), 48, 1, 4, 4, device=sampler.dev, generator=g)
    v = judge(sampler(rows, noise, guidance, **kw))
    n = len(items)
    bg = sum(1 for (cb, _), x in zip(items, v) if x[0] == cb[2]) / n
    col = sum(1 for (cb, _), x in zip(items, v) if x[1] == cb[1]) / n
    both = sum(1 for (cb, _), x in zip(items, v) if x[0] == cb[2] and x[1] == cb[1]) / n
    shp = sum(1 for (cb, _), x in zip(items, v) if x[2] == cb[0]) / n
    pl = [(po, x) for (_, po), x in zip(items, v) if po > 0]
    place = sum(1 for po, x in pl if x[3] == po - 1) / max(len(pl), 1)
    return dict(bg=bg, colour=col, colours=both, shape=shp, place=place, n=n)


def clip_items(held_only, reps):
    """(combination, motion) pairs: the held-out combinations x every motion
    x reps, or as many seen ones (spread over the training combinations)."""
    cmb, held = combos()
    if held_only:
        return [(cb, mo) for cb, h in zip(cmb, held) if h for mo in range(len(MOTIONS))] * reps
    seen = [cb for cb, h in zip(cmb, held) if not h]
    n = sum(held) * len(MOTIONS) * reps
    return [(seen[(i * 7) % len(seen)], i % len(MOTIONS)) for i in range(n)]


def score_clips(sampler, judge, items, task, guidance, seed, max_start=3.0):
    """Sample clips for items (combination, motion) in one task (t2v / i2v /
    v2v: 0 / 1 / 2 leading latent frames given from a rendered clip of that
    motion) and judge them as clips: the rates of both colours right, shape,
    the asked motion, (i2v / v2v) the start within max_start px of the given
    picture's object, and all of them at once; per motion too."""
    st, dev = sampler.st, sampler.dev
    cmb, _ = combos()
    k = TASKS.index(task)
    rows = [st["vids"][cmb.index(cb) * len(MOTIONS) + mo] for cb, mo in items]
    g = torch.Generator().manual_seed(seed)
    attr = torch.tensor([list(cb) + [mo] for cb, mo in items], device=dev)
    geo = torch.stack([torch.randint(10, 16, (len(items),), generator=g), torch.randint(-2, 3, (len(items),), generator=g),
                       torch.randint(-2, 3, (len(items),), generator=g)], 1).to(dev)
    src, _ = draw_clip(attr, geo, dev)
    x0 = sampler.encode(src[:, :, :4 * (k - 1) + 1]) if k else None
    noise = torch.randn(len(items), 48, CLIP_T, 4, 4, generator=g).to(dev)
    clips = sampler.decode_clip(sampler.latents(rows, noise, guidance, x0=x0))
    ref = to_uint8(src[:, :, 0]) if k else None
    v = judge.clips(clips, ref)
    res = {}
    for mo in list(range(len(MOTIONS))) + [None]:
        sel = [(it, x) for it, x in zip(items, v) if mo is None or it[1] == mo]
        n = max(len(sel), 1)
        col = [x["bg"] == cb[2] and x["colour"] == cb[1] for (cb, _), x in sel]
        shp = [x["shape"] == cb[0] for (cb, _), x in sel]
        mot = [x["motion"] == m for (_, m), x in sel]
        start = [not k or x["start_dist"] <= max_start for _, x in sel]
        r = dict(colours=sum(col) / n, shape=sum(shp) / n, motion=sum(mot) / n, start=sum(start) / n,
                 all=sum(a and b and c and d for a, b, c, d in zip(col, shp, mot, start)) / n, n=len(sel))
        res["all" if mo is None else MOTIONS[mo]] = r
    return res


def print_clip_scores(task, guidance, r):
    for part in ("held_out", "seen"):
        x = r[part]["all"]
        per = " ".join(f"{m.replace('moving ', '').replace('to the ', '')} {100 * r[part][m]['motion']:.0f}"
                       for m in MOTIONS)
        print(f"{task} g {guidance}: {part:8s} colours {100 * x['colours']:5.1f} % shape {100 * x['shape']:5.1f} % "
              f"motion {100 * x['motion']:5.1f} % start {100 * x['start']:5.1f} % all {100 * x['all']:5.1f} % "
              f"(n {x['n']}; motion by direction: {per})", flush=True)


def stage_score(a, dev):
    W = a.work
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    sampler = Sampler(load_work(W), dev, dt)
    judge = Judge(a.judge)
    cmb, held = combos()
    reps = a.score_reps
    held_items = [(cb, po) for cb, h in zip(cmb, held) if h for po in range(N_PLACE_OPT)] * reps
    seen = [cb for cb, h in zip(cmb, held) if not h]
    seen_items = [(seen[(i * 7) % len(seen)], i % N_PLACE_OPT) for i in range(len(held_items))]
    res = {"guidance": {}}
    t0 = time.time()
    for gv in a.guidances:
        r = dict(held_out=score_set(sampler, judge, held_items, gv, a.seed + 10),
                 seen=score_set(sampler, judge, seen_items, gv, a.seed + 11))
        res["guidance"][str(gv)] = r
        h, s = r["held_out"], r["seen"]
        print(f"guidance {gv:4}: held-out colours {100 * h['colours']:5.1f} % shape {100 * h['shape']:5.1f} % "
              f"place {100 * h['place']:5.1f} % | seen colours {100 * s['colours']:5.1f} % "
              f"shape {100 * s['shape']:5.1f} % place {100 * s['place']:5.1f} %  (n {h['n']} + {s['n']})",
              flush=True)
    # best: the held-out worst verdict, then the seen one; among ties the
    # middle of the plateau (the guidance farthest from where it breaks)
    key = lambda gv: tuple(min(r[k] for k in ("colours", "shape", "place"))
                           for r in (res["guidance"][str(gv)]["held_out"], res["guidance"][str(gv)]["seen"]))
    top = max(key(gv) for gv in a.guidances)
    ties = sorted(gv for gv in a.guidances if key(gv) == top)
    best = ties[(len(ties) - 1) // 2]
    res["best_guidance"] = best
    print(f"best guidance (held-out, worst verdict first): {best}", flush=True)
    # clips at the best guidance: T2V, I2V, V2V on held-out and seen combinations, every motion
    res["clips"] = {}
    for ti, task in enumerate(TASKS):
        r = dict(held_out=score_clips(sampler, judge, clip_items(True, a.clip_reps), task, best, a.seed + 30 + ti),
                 seen=score_clips(sampler, judge, clip_items(False, a.clip_reps), task, best, a.seed + 40 + ti))
        res["clips"][task] = r
        print_clip_scores(task, best, r)
    res["seconds"] = time.time() - t0
    json.dump(res, open(os.path.join(W, "scores.json"), "w"), indent=1)


# ------------------------------------------------------------ packing

_ST = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int32: "I32", torch.int64: "I64"}


def st_save(path, tensors, meta=None):
    """A safetensors file (sorted names, 8-byte aligned header)."""
    hdr, blobs, off = {}, [], 0
    if meta:
        hdr["__metadata__"] = meta
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous().cpu()
        n = t.numel() * t.element_size()
        hdr[k] = dict(dtype=_ST[t.dtype], shape=list(t.shape), data_offsets=[off, off + n])
        blobs.append(ctypes.string_at(t.data_ptr(), n) if n else b"")
        off += n
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def png_write(path, rgb):
    """rgb [H, W, 3] uint8 -> an 8-bit RGB PNG (zlib, no filter)."""
    import zlib
    H, W = rgb.shape[0], rgb.shape[1]
    data = bytes(rgb.contiguous().view(-1).tolist())
    raw = b"".join(b"\x00" + data[y * W * 3:(y + 1) * W * 3] for y in range(H))
    chunk = lambda t, b: struct.pack(">I", len(b)) + t + b + struct.pack(">I", zlib.crc32(t + b) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def write_json(path, j):
    with open(path + ".tmp", "w") as f:
        json.dump(j, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(path + ".tmp", path)


def stage_pack(a, dev):
    W = a.work
    skel = skeleton(a)
    dst = os.path.join(W, "dit.pt")
    st, vst = torch.load(dst), torch.load(os.path.join(W, "vae.pt"))
    sc = json.load(open(os.path.join(W, "scores.json"))) if os.path.exists(os.path.join(W, "scores.json")) else {}
    guidance = float(sc.get("best_guidance", 3.0))
    c = R.TConfig(st["cfg"])
    used = st["used"]
    # transformer tensors (full embedding for the Diffusers form)
    tw = {k: v for k, v in st["weights"].items() if k != "embed_rows"}
    rows = st["weights"]["embed_rows"]
    full = torch.zeros(st["cfg"]["vocab_size"], c.D)
    full[torch.tensor(used)] = rows
    vcfg = dict(vst["cfg"])
    vcfg["latents_mean"] = [float(x) for x in st["mean"]]
    vcfg["latents_std"] = [float(x) for x in st["std"]]
    defaults = dict(width=SIZE, height=SIZE, steps=20, guidance=guidance, schedule="linear", shift=3.0,
                    guidance_interval=[400, 1000])
    vocab = sorted({w for t in st["texts"] + st.get("vtexts", []) for w in t.replace(",", " ").split()})
    examples = [caption(SHAPES.index(s), COLOURS.index(col), COLOURS.index(b), p) for (s, col, b), p in
                zip(HELD_OUT[:4], (2, -1, 3, 0))]
    # clip prompts stay out: `info` prints each as `cosmos3 gen -p "..."`, one picture; the about text
    # and the model card say --frames 9
    about = ("the built-in demo model: Cosmos3's architecture at toy size, trained from scratch by "
             "demo/demo_train.py on a synthetic world (demo/demo_world.md): 64x64 pictures of one circle, square "
             "or triangle (apex up, 10-15 px) in red, green, blue, yellow, purple, orange, white or black, on a "
             "plain background of another of those colours, in the center or 10 px left, right, up or down of it; "
             "prompts read \"a {colour} {shape} on a {colour} background\", optionally followed by "
             "\", in the center\", \", on the left\", \", on the right\", \", at the top\" or \", at the bottom\"; "
             "and 9-frame clips (--frames 9) of the object moving 2 px a frame from 8 px before the centre to 8 px "
             "after it, prompted \"..., moving to the right\" (\"moving to the left\", \"moving up\", \"moving down\", "
             "\"not moving\"): text-to-video, image-to-video (--image: the first frame) and video-to-video (--video: "
             "the first 5 frames)")
    # --- the Diffusers layout (full embedding, encoder + decoder, bf16 / f32)
    dd = os.path.join(W, "diffusers")
    if os.path.exists(dd):
        shutil.rmtree(dd)
    shutil.copytree(skel, dd, ignore=shutil.ignore_patterns("*.safetensors"))
    mi = json.load(open(os.path.join(skel, "model_index.json")))
    # "an" is not in the training texts ("a orange"), yet draws the same (checked
    # with the C engine on three seeds): no vocabulary warning for it
    mi["cosmos3"] = dict(about=about, defaults=defaults, vocabulary=vocab, fillers=["an"], examples=examples,
                         held_out=[list(h) for h in HELD_OUT])
    if "clips" in sc:  # the motion scores at the default guidance (T2V / I2V / V2V, held-out and seen)
        mi["cosmos3"]["clip_scores"] = {t: {p: {k: v for k, v in sc["clips"][t][p]["all"].items()} for p in
                                            ("held_out", "seen")} for t in sc["clips"]}
    write_json(os.path.join(dd, "model_index.json"), mi)
    tc = dict(st["cfg"])
    tc["_cosmos3_note"] = f"trained by demo/demo_train.py (seed {a.seed}, {st['steps']} steps)"
    write_json(os.path.join(dd, "transformer", "config.json"), tc)
    write_json(os.path.join(dd, "vae", "config.json"), vcfg)
    tfull = {k: v.to(torch.bfloat16) for k, v in tw.items()}
    tfull["embed_tokens.weight"] = full.to(torch.bfloat16)
    st_save(os.path.join(dd, "transformer", "diffusion_pytorch_model.safetensors"), tfull)
    st_save(os.path.join(dd, "vae", "diffusion_pytorch_model.safetensors"), vst["weights"])
    # --- VAE decoder in bf16? Same latents decoded with f32 and bf16-rounded weights.
    dec = {k: v for k, v in vst["weights"].items() if k.startswith("decoder.") or k.startswith("post_quant_conv.")}
    enc = {k: v for k, v in vst["weights"].items() if k.startswith("encoder.") or k.startswith("quant_conv.")}
    g = torch.Generator().manual_seed(a.seed + 20)
    zt = torch.randn(64, 48, 1, 4, 4, generator=g).to(dev) * st["std"].to(dev)[None, :, None, None, None] + \
        st["mean"].to(dev)[None, :, None, None, None]
    v32 = R.WanVAE(vcfg, {k: v.to(dev) for k, v in dec.items()}, dev, torch.float32)
    v16 = R.WanVAE(vcfg, {k: v.to(dev).to(torch.bfloat16).float() for k, v in dec.items()}, dev, torch.float32)
    with torch.no_grad():
        p32 = to_uint8(v32.decode_raw(zt)[:, :, 0])
        p16 = to_uint8(v16.decode_raw(zt)[:, :, 0])
    vmax = int((p32.int() - p16.int()).abs().max())
    vae_bf16 = vmax <= 2
    if a.judge:
        j = Judge(a.judge)
        vae_bf16 = vae_bf16 and j(p32) == j(p16)
    print(f"VAE decoder bf16 vs f32 weights: max pixel move {vmax} levels -> stored as "
          f"{'bf16' if vae_bf16 else 'f32'}", flush=True)
    # --- the encoder (image-/video-to-video) in bf16? Clips encoded with f32 and bf16-rounded
    # encoder weights, both decoded by the f32 decoder: the same rule
    full32 = R.WanVAE(vcfg, {k: v.to(dev) for k, v in vst["weights"].items()}, dev, torch.float32)
    e16 = R.WanVAE(vcfg, {k: (v.to(dev).to(torch.bfloat16).float() if k in enc else v.to(dev))
                          for k, v in vst["weights"].items()}, dev, torch.float32)
    cmb_, held_ = combos()
    held_t = torch.tensor([cb for cb, h in zip(cmb_, held_) if h], device=dev)
    cattr, cgeo, _ = random_clips(32, held_t, dev, torch.Generator().manual_seed(a.seed + 22))
    clip, _ = draw_clip(cattr, cgeo, dev)
    with torch.no_grad():
        c32 = to_uint8(full32.decode_raw(full32.encode_batch(clip)[0].float()))
        c16 = to_uint8(full32.decode_raw(e16.encode_batch(clip)[0].float()))
    emax = int((c32.int() - c16.int()).abs().max())
    enc_bf16 = emax <= 2
    if a.judge:
        j = Judge(a.judge)
        enc_bf16 = enc_bf16 and j.clips(c32) == j.clips(c16)
    print(f"VAE encoder bf16 vs f32 weights (32 held-out clips): max pixel move {emax} levels -> stored as "
          f"{'bf16' if enc_bf16 else 'f32'}", flush=True)
    # --- the transformer in bf16 (f32 would not fit the 30 MB budget): how far it moves pictures
    d32 = load_work(W)
    d16 = dict(d32, weights={k: v.to(torch.bfloat16).float() for k, v in d32["weights"].items()})
    cmb, held = combos()
    prompts = [d32["ids"][i * N_PLACE_OPT + (i % N_PLACE_OPT)] for i in range(0, len(cmb), 3)][:64]
    noise = torch.randn(len(prompts), 48, 1, 4, 4, generator=torch.Generator().manual_seed(a.seed + 21)).to(dev)
    p32 = Sampler(d32, dev, torch.float32)(prompts, noise, guidance)
    p16 = Sampler(d16, dev, torch.float32)(prompts, noise, guidance)
    tmax = int((p32.int() - p16.int()).abs().max())
    same = "?"
    if a.judge:
        j = Judge(a.judge)
        v32, v16 = j(p32), j(p16)
        same = f"{sum(x == y for x, y in zip(v32, v16))}/{len(prompts)}"
    print(f"transformer bf16 vs f32 weights ({len(prompts)} pictures, fp32 compute): max pixel move {tmax} levels, "
          f"the same verdicts on {same}; shipped as bf16 (f32 would not fit the 30 MB budget)", flush=True)
    # --- the shipped form
    sd = a.to
    tmp = sd.rstrip("/") + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(os.path.join(tmp, "transformer"))
    os.makedirs(os.path.join(tmp, "vae"))
    os.makedirs(os.path.join(tmp, "scheduler"))
    mi2 = dict(mi)
    mi2["cosmos3"] = dict(mi["cosmos3"], tokenizer="builtin", scores=sc.get("guidance", {}).get(str(guidance), {}))
    write_json(os.path.join(tmp, "model_index.json"), mi2)
    write_json(os.path.join(tmp, "transformer", "config.json"), tc)
    write_json(os.path.join(tmp, "vae", "config.json"), vcfg)
    shutil.copy(os.path.join(skel, "scheduler", "scheduler_config.json"), os.path.join(tmp, "scheduler"))
    ship = {k: v.to(torch.bfloat16) for k, v in tw.items()}
    ship["embed_tokens.rows"] = rows.to(torch.bfloat16)
    ship["embed_tokens.ids"] = torch.tensor(used, dtype=torch.int32)
    st_save(os.path.join(tmp, "transformer", "diffusion_pytorch_model.safetensors"), ship)
    vship = {k: v.to(torch.bfloat16) if vae_bf16 else v for k, v in dec.items()}
    vship.update({k: v.to(torch.bfloat16) if enc_bf16 else v for k, v in enc.items()})
    st_save(os.path.join(tmp, "vae", "diffusion_pytorch_model.safetensors"), vship)
    if os.path.exists(sd):
        shutil.rmtree(sd)
    os.replace(tmp, sd)
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(sd) for f in fs)
    print(f"packed: {dd} (Diffusers layout) and {sd} ({size / 1e6:.1f} MB; {len(used)} embedding rows, "
          f"guidance {guidance})", flush=True)


def stage_bench(a, dev):
    """The PyTorch sampler on the shipped weights (--ckpt), batch 1, 20 steps
    with CFG, VAE included, model loaded: seconds per 64x64 image."""
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    t0 = time.time()
    sampler = Sampler(load_ckpt(a.ckpt, a), dev, dt)
    load = time.time() - t0
    rows = [sampler.st["ids"][1]]
    noise = torch.randn(1, 48, 1, 4, 4, device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(2):
        sampler(rows, noise, 3.0)
    sync()
    ts = []
    for _ in range(a.bench_reps):
        t = time.time()
        sampler(rows, noise, 3.0)
        sync()
        ts.append(time.time() - t)
    ts.sort()
    r = dict(device=str(dev), torch=torch.__version__, per_image_s=ts[len(ts) // 2], best_s=ts[0], load_s=load,
             reps=a.bench_reps)
    print(json.dumps(r), flush=True)
    if a.json_out:
        json.dump(r, open(a.json_out, "w"), indent=1)


def stage_check(a, dev):
    """The C engine against this script's forward on the shipped weights
    (--ckpt): same prompt ids, same initial noise (--noise), final latents
    (--save-latents) compared with the PyTorch sampler in fp32 (TF32 off).
    One forward (1 step, guidance 1: x - sigma_0 v) and the default sampling
    (20 steps, CFG), on each of --c-devices. Exit 1 past the tolerances
    (one forward: 1e-4 for the fp32 CPU backend, 2e-2 for bf16 CUDA)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    d = load_ckpt(a.ckpt, a)
    ref = Sampler(d, dev, torch.float32)
    cmb, _ = combos()
    W = a.work
    bad, rows = 0, []
    tol1 = {"cpu": 1e-4, "cuda": 2e-2}
    for i, (sh, col, bg) in enumerate(HELD_OUT[:4]):
        cb = (SHAPES.index(sh), COLOURS.index(col), COLOURS.index(bg))
        place = i % 3 - 1
        text = caption(*cb, place)
        ids = d["ids"][cmb.index(cb) * N_PLACE_OPT + place + 1]
        g = torch.Generator().manual_seed(100 + i)
        noise = torch.randn(1, 48, 1, 4, 4, generator=g)
        nf = os.path.join(W, f"noise{i}.safetensors")
        st_save(nf, {"latents": noise})
        for steps, gd in ((1, 1.0), (20, float(json.load(open(os.path.join(a.ckpt, "model_index.json")))[
                "cosmos3"]["defaults"]["guidance"]))):
            want = ref.latents([ids], noise.to(dev), gd, steps=steps).cpu()
            for cdev in a.c_devices.split(","):
                out = os.path.join(W, f"c_{cdev}_{i}_{steps}.safetensors")
                subprocess.run([a.cosmos3, "gen", "-m", a.ckpt, "-p", text, "--noise", nf, "--save-latents", out,
                                "--steps", str(steps), "--guidance", str(gd), "--device", cdev, "-o",
                                os.path.join(W, "check.png"), "--overwrite", "-q"], check=True)
                got = R.st_load(out)["latents"].float()
                e = R.rel_l2(got, want)
                lim = tol1[cdev] if steps == 1 else None
                ok = lim is None or e <= lim
                bad += not ok
                rows.append(dict(prompt=text, device=cdev, steps=steps, guidance=gd, rel_l2=e))
                print(f"  {text:55s} {cdev:4s} {steps:2d} steps g {gd:3.1f}: rel L2 {e:.2e}"
                      f"{'' if lim is None else (' ok' if ok else ' FAIL (tol %.0e)' % lim)}", flush=True)
    # clips: text-, image- and video-to-video (pinned latent frames), the engine's
    # --image / --video DIR against this script's sampler from the same pixels
    # (bf16 CUDA: its encoder's x0 is in the pinned frames too, the goldens' 6e-2)
    tolc = {"cpu": 1e-4, "cuda": 6e-2}
    gd_def = float(json.load(open(os.path.join(a.ckpt, "model_index.json")))["cosmos3"]["defaults"]["guidance"])
    for i, (task, (sh, col, bg), mo) in enumerate((("i2v", HELD_OUT[0], 1), ("v2v", HELD_OUT[6], 3),
                                                   ("t2v", HELD_OUT[3], 2))):
        cb = (SHAPES.index(sh), COLOURS.index(col), COLOURS.index(bg))
        k = TASKS.index(task)
        text = clip_caption(*cb, mo)
        ids = d["vids"][cmb.index(cb) * len(MOTIONS) + mo]
        src, _ = draw_clip(torch.tensor([list(cb) + [mo]], device=dev), torch.tensor([[12, 1, -1]], device=dev), dev)
        rgb = to_uint8(src)[0].cpu()  # [9, 64, 64, 3]
        flags = []
        if k == 1:
            png_write(os.path.join(W, "cond_in.png"), rgb[0])
            flags = ["--image", os.path.join(W, "cond_in.png")]
        elif k == 2:
            vd = os.path.join(W, "cond_in")
            shutil.rmtree(vd, ignore_errors=True)
            os.makedirs(vd)
            for f in range(CLIP_FRAMES):
                png_write(os.path.join(vd, f"{f:02d}.png"), rgb[f])
            flags = ["--video", vd]
        # the pixels as the engine preprocesses a 64x64 input: u / 127.5 - 1 (same as 2 u / 255 - 1 to 1 ulp)
        px = (rgb.float() / 127.5 - 1).permute(3, 0, 1, 2)[None].to(dev)  # [1, 3, 9, 64, 64]
        x0 = ref.encode(px[:, :, :4 * (k - 1) + 1]) if k else None
        g = torch.Generator().manual_seed(200 + i)
        noise = torch.randn(1, 48, CLIP_T, 4, 4, generator=g)
        nf = os.path.join(W, f"noise_clip{i}.safetensors")
        st_save(nf, {"latents": noise})
        od = os.path.join(W, "check_clip")
        os.makedirs(od, exist_ok=True)
        for steps, gd in ((1, 1.0), (20, gd_def)):
            want = ref.latents([ids], noise.to(dev), gd, steps=steps, x0=x0).cpu()
            for cdev in a.c_devices.split(","):
                out = os.path.join(W, f"c_{cdev}_clip{i}_{steps}.safetensors")
                subprocess.run([a.cosmos3, "gen", "-m", a.ckpt, "-p", text, "--frames", str(CLIP_FRAMES)] + flags +
                               ["--noise", nf, "--save-latents", out, "--steps", str(steps), "--guidance", str(gd),
                                "--device", cdev, "-o", os.path.join(od, "%04d.png"), "--overwrite", "-q"],
                               check=True)
                got = R.st_load(out)["latents"].float()
                e = R.rel_l2(got, want)
                lim = tolc[cdev] if steps == 1 else None
                ok = lim is None or e <= lim
                bad += not ok
                rows.append(dict(prompt=text, task=task, device=cdev, steps=steps, guidance=gd, rel_l2=e))
                print(f"  {task} {text:65s} {cdev:4s} {steps:2d} steps g {gd:3.1f}: rel L2 {e:.2e}"
                      f"{'' if lim is None else (' ok' if ok else ' FAIL (tol %.0e)' % lim)}", flush=True)
    if a.json_out:
        json.dump(rows, open(a.json_out, "w"), indent=1)
    print(f"check: {bad} failed", flush=True)
    if bad:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["all", "vae", "dit", "score", "pack", "bench", "check"])
    ap.add_argument("--work", required=True, help="working folder (stage outputs)")
    ap.add_argument("--to", default="share/models/demo", help="pack: the shipped form's folder")
    ap.add_argument("--ckpt", default="share/models/demo", help="bench, check: the shipped checkpoint")
    ap.add_argument("--c-devices", default="cpu", help="check: the C engine's devices (cpu,cuda)")
    ap.add_argument("--cosmos3", default="build/cosmos3")
    ap.add_argument("--judge", default="build/tests/libdemojudge.so")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-graph", dest="graph", action="store_false")
    ap.add_argument("--vae-steps", type=int, default=6000)
    ap.add_argument("--vae-seconds", type=float, default=160)
    ap.add_argument("--vae-batch", type=int, default=256)
    ap.add_argument("--vae-lr", type=float, default=1e-3)
    ap.add_argument("--vae-mu-penalty", type=float, default=1e-4)
    ap.add_argument("--vae-clip-batch", type=int, default=24, help="vae: 9-frame clips per step beside the pictures")
    ap.add_argument("--vae-clip-weight", type=float, default=1.0)
    ap.add_argument("--bank", type=int, default=131072, help="pictures encoded for the transformer")
    ap.add_argument("--clip-bank", type=int, default=32768, help="clips encoded for the transformer")
    ap.add_argument("--dit-steps", type=int, default=18000)
    ap.add_argument("--dit-seconds", type=float, default=275)
    ap.add_argument("--dit-batch", type=int, default=512)
    ap.add_argument("--dit-video-frac", type=float, default=0.625, help="dit: the share of clips in a batch")
    ap.add_argument("--task-mix", default="4,3,3", help="dit: clips' weights of t2v, i2v, v2v")
    ap.add_argument("--dit-lr", type=float, default=8e-4)
    ap.add_argument("--guidances", default="1.5,2,3,4,5,7")
    ap.add_argument("--score-reps", type=int, default=4, help="score: seeds per held-out prompt")
    ap.add_argument("--clip-reps", type=int, default=4, help="score: seeds per held-out clip prompt and task")
    ap.add_argument("--smoke", action="store_true",
                    help="a handful of steps per stage, tiny batches and banks (a run that proves the code)")
    ap.add_argument("--bench-reps", type=int, default=10)
    ap.add_argument("--json-out", default="")
    a = ap.parse_args()
    if a.smoke:
        a.vae_steps, a.vae_batch, a.vae_clip_batch, a.bank, a.clip_bank = 3, 8, 2, 256, 32
        a.dit_steps, a.dit_batch, a.score_reps, a.clip_reps, a.bench_reps = 3, 16, 1, 1, 1
        a.guidances = "4"
    a.guidances = [float(x) for x in a.guidances.split(",")]
    os.makedirs(a.work, exist_ok=True)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    print(f"torch {torch.__version__} on {dev}", flush=True)
    stages = ["vae", "dit", "score", "pack"] if a.stage == "all" else [a.stage]
    for s in stages:
        t = time.time()
        globals()["stage_" + s](a, dev)
        print(f"stage {s}: {time.time() - t:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
