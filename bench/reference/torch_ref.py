#!/usr/bin/env python3
"""torch_ref.py - Cosmos3 in plain PyTorch (no diffusers): our one full
statement of the model in Python, for checking and for timing.

  python3 bench/reference/torch_ref.py check --fixtures DIR     (DIR holds tiny-a/)
      fp32 on the CPU (or --device cuda, TF32 off) against every tiny-a
      golden: UND K/V, GEN forward velocities, the six-step end-to-end
      latents (UniPC + sigma schedules + CFG) and the VAE decodes; prints
      relative L2 errors and exits 1 if one is over its tolerance.
  python3 bench/reference/torch_ref.py bench [--sizes t2i,480p,720p] [--lc N --lu N]
      bf16 on the GPU, random weights of the Nano GEN tower: one CFG step
      (cond + uncond GEN calls, 36 layers, UND K/V given) at T2I 1024^2
      (1,024 tokens), 480p 93 frames (9,360) and 720p 189 frames (44,160),
      with cuDNN SDPA + torch matmul; then attention alone on the GEN shapes
      (hd 128, 32 q / 8 KV heads, keys = L + S) in TFLOP/s.

The model (../shared/cosmos3-spec.md): two towers of one geometry; UND reads
the prompt ids (causal), GEN the patchified latents and attends without a
mask to [UND K/V | GEN K/V]; 3D interleaved mRoPE; timestep embedding added
to the GEN input; Wan2.2 VAE (48 channels, 4x16x16). Prompt ids come from the
golden files (or from `cosmos3 tokenize`).
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

# ------------------------------------------------------------ safetensors

_DT = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
       "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8}


def st_load(path):
    """Every tensor of a safetensors file (copied out of the file)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = bytearray(f.read())
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        dt = _DT[v["dtype"]]
        if e == b:
            out[k] = torch.zeros(v["shape"], dtype=dt)
            continue
        t = torch.frombuffer(data, dtype=dt, count=(e - b) // torch.tensor([], dtype=dt).element_size(), offset=b)
        out[k] = t.reshape(v["shape"]).clone()
    return out


def load_folder_tensors(folder):
    """All safetensors of a Diffusers component folder; names normalised
    (a leading 'model.' stripped, spec section 5)."""
    out = {}
    for fn in sorted(os.listdir(folder)):
        if fn.endswith(".safetensors"):
            for k, v in st_load(os.path.join(folder, fn)).items():
                out[k[6:] if k.startswith("model.") else k] = v
    return out


# --------------------------------------------------------------- config

class TConfig:
    def __init__(self, j):
        self.D = j["hidden_size"]
        self.layers = j["num_hidden_layers"]
        self.Hq = j["num_attention_heads"]
        self.Hkv = j.get("num_key_value_heads", self.Hq)
        self.hd = j.get("head_dim", self.D // self.Hq)
        self.I = j["intermediate_size"]
        act = j.get("hidden_act", "silu")
        self.gated = act in ("silu", "swish")
        self.nemotron = "nemotron" in str(j.get("backbone_type", ""))
        self.und_qk_norm = j.get("qk_norm_for_text", True)
        self.und_k_norm_for_gen = j.get("use_und_k_norm_for_gen", False)
        self.eps = j.get("rms_norm_eps", 1e-6)
        self.theta = j.get("rope_theta", 5e6)
        rs = j.get("rope_scaling") or j.get("rope_parameters") or {}
        half = self.hd // 2
        self.mrope = rs.get("mrope_section", [half - 2 * (half * 5 // 16), half * 5 // 16, half * 5 // 16])
        self.C = j.get("latent_channel", 48)
        self.p = j.get("latent_patch_size", 2)
        self.ts_scale = j.get("timestep_scale", 0.001)
        self.base_fps = j.get("base_fps", 24)
        self.fps_mod = j.get("enable_fps_modulation", True)
        self.margin = j.get("unified_3d_mrope_temporal_modality_margin", 15000)


# ---------------------------------------------------------- transformer

def rmsnorm(x, w, eps, mul_fp32=False):
    """Statistics in fp32; Qwen rounds the normalised x to x's dtype before
    the weight, Nemotron multiplies in fp32 (spec section 3)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if mul_fp32:
        return (y * w.float()).to(x.dtype)
    return y.to(x.dtype) * w


_ROPE_CONSTS = {}


def rope_tables(c, pos, dtype):
    """cos, sin [..., N, hd] for positions pos [..., 3, N] (t, h, w), interleaved mRoPE."""
    key = (c.hd, c.theta, tuple(c.mrope), str(pos.device))
    if key not in _ROPE_CONSTS:  # made once per device (no host copies inside a CUDA graph)
        half = c.hd // 2
        # inv_freq in float32 exactly as upstream (positions reach 15000+: one ulp matters)
        inv = 1.0 / (c.theta ** (torch.arange(0, c.hd, 2, dtype=torch.int64).float() / c.hd))
        j = torch.arange(half)
        axis = torch.zeros(half, dtype=torch.long)  # 0 = T
        for a in (1, 2):
            sel = (j % 3 == a) & (j < 3 * c.mrope[a])
            axis[sel] = a
        _ROPE_CONSTS[key] = (inv.to(pos.device), axis.to(pos.device))
    inv, axis = _ROPE_CONSTS[key]
    p = pos.float()  # [..., 3, N] fp32
    ang = p.index_select(-2, axis).transpose(-1, -2) * inv  # [..., N, half] fp32
    emb = torch.cat([ang, ang], -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope(x, cos, sin):
    """x [..., N, H, hd], cos/sin [..., N, hd]; rotate-half."""
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos.unsqueeze(-2) + rot * sin.unsqueeze(-2)


def _sdpa(q, k, v, causal=False, mask=None):
    """[B, H, S, hd] attention; a plain softmax where torch has no SDPA (1.x)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        Sq, Sk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(Sq, Sk, dtype=torch.bool, device=s.device).tril(Sk - Sq).logical_not(),
                          -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf)
    return (s.softmax(-1) @ v.float()).to(q.dtype)


def sdpa(q, k, v, causal, backend=None):
    """q [Sq, Hq, hd], k, v [Sk, Hkv, hd] -> [Sq, Hq, hd] (GQA by repeat)."""
    g = q.shape[1] // k.shape[1]
    qh, kh, vh = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
    if g > 1:
        kh = kh.repeat_interleave(g, dim=1)
        vh = vh.repeat_interleave(g, dim=1)
    o = _sdpa(qh, kh, vh, causal=causal)
    return o[0].transpose(0, 1)


def attend(q, k, v, causal, key_mask=None):
    """Batched: q [B, Sq, Hq, hd], k, v [B, Sk, Hkv, hd], key_mask [B, Sk] bool
    (False = padding) -> [B, Sq, Hq, hd]. One unmasked sample goes through
    sdpa() (which the benchmark swaps for its cuDNN variant)."""
    if q.shape[0] == 1 and key_mask is None:
        return sdpa(q[0], k[0], v[0], causal)[None]
    g = q.shape[2] // k.shape[2]
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if g > 1:
        kh = kh.repeat_interleave(g, dim=1)
        vh = vh.repeat_interleave(g, dim=1)
    m = None if key_mask is None else key_mask[:, None, None, :]
    return _sdpa(qh, kh, vh, causal=causal, mask=m).transpose(1, 2)


class Cosmos3:
    """Both towers from a Diffusers transformer folder (or a weight dict)."""

    def __init__(self, c, w, device, dtype):
        self.c, self.dev, self.dt = c, device, dtype
        self.w = {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in w.items()}
        # timestep MLP in fp32 (spec)
        for k in ("time_embedder.linear_1.weight", "time_embedder.linear_1.bias",
                  "time_embedder.linear_2.weight", "time_embedder.linear_2.bias"):
            self.w[k] = w[k].to(device=device, dtype=torch.float32)

    def lin(self, x, name, bias=False):
        y = x @ self.w[name + ".weight"].t()
        return y + self.w[name + ".bias"] if bias else y

    def mlp(self, x, pre):
        up = self.lin(x, pre + ".up_proj")
        if self.c.gated:
            h = F.silu(self.lin(x, pre + ".gate_proj")) * up
        else:
            h = torch.relu(up).square()
        return self.lin(h, pre + ".down_proj")

    def und(self, ids):
        """UND tower over ids [L]: per layer (K for GEN, V) [L, Hkv, hd]."""
        kv = self.und_batch(torch.as_tensor(ids, device=self.dev).view(1, -1))
        return [(k[0], v[0]) for k, v in kv]

    def und_batch(self, ids):
        """ids [B, L] (right-padded; causal, so padding never reaches a real
        token): per layer (K for GEN, V) [B, L, Hkv, hd]."""
        c = self.c
        B, L = ids.shape
        x = self.w["embed_tokens.weight"][ids]
        n = torch.arange(L, device=self.dev)
        cos, sin = rope_tables(c, torch.stack([n, n, n]), self.dt)
        mf = c.nemotron
        kv = []
        for l in range(c.layers):
            p = f"layers.{l}."
            h = rmsnorm(x, self.w[p + "input_layernorm.weight"], c.eps, mf)
            q = self.lin(h, p + "self_attn.to_q").view(B, L, c.Hq, c.hd)
            k = self.lin(h, p + "self_attn.to_k").view(B, L, c.Hkv, c.hd)
            v = self.lin(h, p + "self_attn.to_v").view(B, L, c.Hkv, c.hd)
            kraw = k
            if c.und_qk_norm:
                q = rmsnorm(q, self.w[p + "self_attn.norm_q.weight"], c.eps, mf)
                k = rmsnorm(k, self.w[p + "self_attn.norm_k.weight"], c.eps, mf)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            if c.und_k_norm_for_gen:
                kg = rope(rmsnorm(kraw, self.w[p + "self_attn.k_norm_und_for_gen.weight"], c.eps, mf), cos, sin)
            else:
                kg = k
            kv.append((kg, v))
            if l == c.layers - 1:
                break  # the last layer's output is never read (GEN needs only K/V)
            a = attend(q, k, v, causal=True).reshape(B, L, c.Hq * c.hd)
            x = x + self.lin(a, p + "self_attn.to_out")
            x = x + self.mlp(rmsnorm(x, self.w[p + "post_attention_layernorm.weight"], c.eps, mf), p + "mlp")
        return kv

    def gen_positions(self, L, T, hp, wp, fps):
        """[3, S] positions of the GEN tokens after a prompt of L ids; L may be
        a [B] tensor (one prompt length per sample, on any device) -> [B, 3, S]."""
        c = self.c
        t = torch.arange(T, dtype=torch.float64, device=self.dev)
        rel = t * (c.base_fps / fps) if T > 1 and c.fps_mod else t
        Lt = torch.as_tensor(L, device=self.dev)
        pt = (Lt.double()[..., None] + c.margin + rel).float()  # [..., T]
        shp = tuple(Lt.shape) + (T, hp, wp)
        pt = pt[..., :, None, None].expand(shp)
        ph = torch.arange(hp, dtype=torch.float32, device=self.dev)[:, None].expand(shp)
        pw = torch.arange(wp, dtype=torch.float32, device=self.dev).expand(shp)
        return torch.stack([pt, ph, pw], -4).flatten(-3)

    def temb(self, t):
        """Timestep embedding: t a number -> [D]; t a [B] tensor -> [B, D] (fp32)."""
        c = self.c
        w1 = self.w["time_embedder.linear_1.weight"]
        half = w1.shape[1] // 2
        tt = torch.as_tensor(t, dtype=torch.float64, device=self.dev)
        s = (tt.reshape(-1) * c.ts_scale).float()[:, None]
        f = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=self.dev) / half)
        e = torch.cat([torch.cos(s * f), torch.sin(s * f)], -1)
        h = F.silu(e @ w1.t() + self.w["time_embedder.linear_1.bias"])
        o = h @ self.w["time_embedder.linear_2.weight"].t() + self.w["time_embedder.linear_2.bias"]
        return o if tt.dim() else o[0]

    def gen(self, kv, latents, t, fps=24.0):
        """latents [C, T, h, w] -> velocity [C, T, h, w]."""
        kvb = [(k[None], v[None]) for k, v in kv]
        return self.gen_batch(kvb, latents[None], torch.tensor([float(t)]), fps)[0]

    def gen_batch(self, kv, latents, t, fps=24.0, lens=None, pos=None, noisy=None):
        """latents [B, C, T, h, w], t [B], kv from und_batch ([B, L, Hkv, hd]
        per layer), lens [B] prompt lengths (None: all L) -> velocity
        [B, C, T, h, w] fp32. pos: precomputed GEN positions [B, 3, S].
        noisy [B, T] bool (None: every frame): the latent frames being
        denoised; the others are pinned (image- / video-to-video): their
        tokens enter clean without the timestep embedding and their velocity
        is zero, as upstream's vision_noisy_frame_indexes and the C engine."""
        c = self.c
        B, C, T, h, w = latents.shape
        p = c.p
        hp, wp = -(-h // p), -(-w // p)
        x = F.pad(latents, (0, wp * p - w, 0, hp * p - h))
        tok = x.reshape(B, C, T, hp, p, wp, p).permute(0, 2, 3, 5, 4, 6, 1).reshape(B, T * hp * wp, p * p * C)
        S = tok.shape[1]
        L = kv[0][0].shape[1]
        mask = None
        if lens is not None:
            und_ok = torch.arange(L, device=self.dev)[None, :] < lens.to(self.dev)[:, None]
            mask = torch.cat([und_ok, torch.ones(B, S, dtype=torch.bool, device=self.dev)], 1)
        te = self.temb(t).to(self.dt)[:, None, :]  # [B, 1, D]
        if noisy is not None:  # [B, T] -> [B, S, 1]: the timestep on the noisy frames' tokens only
            te = te * noisy.to(device=self.dev, dtype=self.dt)[:, :, None, None].expand(B, T, hp * wp, 1).reshape(
                B, T * hp * wp, 1)
        g = self.lin(tok.to(self.dt), "proj_in", bias=True) + te
        if pos is None:
            pos = self.gen_positions(lens if lens is not None else torch.full((B,), L), T, hp, wp, fps)
        cos, sin = rope_tables(c, pos, self.dt)
        mf = c.nemotron
        for l in range(c.layers):
            pre = f"layers.{l}."
            hh = rmsnorm(g, self.w[pre + "input_layernorm_moe_gen.weight"], c.eps, mf)
            q = self.lin(hh, pre + "self_attn.add_q_proj").view(B, S, c.Hq, c.hd)
            k = self.lin(hh, pre + "self_attn.add_k_proj").view(B, S, c.Hkv, c.hd)
            v = self.lin(hh, pre + "self_attn.add_v_proj").view(B, S, c.Hkv, c.hd)
            q = rope(rmsnorm(q, self.w[pre + "self_attn.norm_added_q.weight"], c.eps, mf), cos, sin)
            k = rope(rmsnorm(k, self.w[pre + "self_attn.norm_added_k.weight"], c.eps, mf), cos, sin)
            ku, vu = kv[l]
            a = attend(q, torch.cat([ku, k], 1), torch.cat([vu, v], 1), False, mask).reshape(B, S, c.Hq * c.hd)
            g = g + self.lin(a, pre + "self_attn.to_add_out")
            g = g + self.mlp(rmsnorm(g, self.w[pre + "post_attention_layernorm_moe_gen.weight"], c.eps, mf),
                             pre + "mlp_moe_gen")
        g = rmsnorm(g, self.w["norm_moe_gen.weight"], c.eps, mf)
        out = self.lin(g, "proj_out", bias=True).float()
        v = out.view(B, T, hp, wp, p, p, C).permute(0, 6, 1, 2, 4, 3, 5).reshape(B, C, T, hp * p, wp * p)
        v = v[:, :, :, :h, :w]
        if noisy is not None:  # the pinned frames' velocity is zero
            v = v * noisy.to(device=self.dev, dtype=v.dtype)[:, None, :, None, None]
        return v


# -------------------------------------------------------------- sampler

def sigma_schedule(sc, n, mode, shift):
    """sigmas [n+1] (float64, last 0) and integer timesteps [n] (spec section 4)."""
    T = sc.get("num_train_timesteps", 1000)
    S = lambda s: shift * s / (1 + (shift - 1) * s)
    if mode == "karras":
        rho = 7.0
        lo, hi = sc["sigma_min"], sc["sigma_max"]
        a = [(hi ** (1 / rho) + (i / (n - 1) if n > 1 else 0) * (lo ** (1 / rho) - hi ** (1 / rho))) ** rho
             for i in range(n)]
        sig = [x / (1 + x) for x in a]
    elif mode == "native":
        s = [(1 - 1 / T) * (1 - i / n) for i in range(n)]
        sig = [S(x) for x in s]
    else:  # linear (diffusers use_karras_sigmas=False)
        s = [1 - i * (1 - 1 / T) / n for i in range(n)]
        sig = [S(x) for x in s]
        if abs(sig[0] - 1) < 1e-6:
            sig[0] -= 1e-6
    ts = [int(x * T) for x in sig]
    return sig + [0.0], ts


class UniPC:
    """UniPC bh2, predict_x0, flow sigmas, lower_order_final (spec section 4)."""

    def __init__(self, sigmas, order=2):
        self.s = [float(torch.tensor(x, dtype=torch.float32)) for x in sigmas]  # sigmas stored as float32
        self.order, self.N = order, len(sigmas) - 1
        self.ms, self.last, self.p, self.i, self.done = [], None, 1, 0, 0

    def lam(self, i):
        s = self.s[i]
        return math.log(1 - s) - math.log(s) if s > 0 else math.inf

    def _coef(self, hh, order):
        h1 = math.expm1(hh)
        B = h1
        hk, fac, b = h1 / hh - 1, 1, []
        for k in range(1, order + 1):
            b.append(hk * fac / B)
            fac *= k + 1
            hk = hk / hh - 1 / fac
        return h1, B, b

    def step(self, v, x):
        i = self.i
        m = x - self.s[i] * v
        if i > 0:  # corrector with the previous order
            m0, s0, st = self.ms[-1], self.s[i - 1], self.s[i]
            h = self.lam(i) - self.lam(i - 1)
            hh = -h
            p = self.p
            rks, D1 = [], []
            for k in range(1, p):
                rk = (self.lam(i - 1 - k) - self.lam(i - 1)) / h
                rks.append(rk)
                D1.append((self.ms[-(k + 1)] - m0) / rk)
            rks.append(1.0)
            h1, B, b = self._coef(hh, p)
            if p == 1:
                rhos = [0.5]
            else:
                R = torch.tensor([[r ** (k - 1) for r in rks] for k in range(1, p + 1)], dtype=torch.float64)
                rhos = torch.linalg.solve(R, torch.tensor(b, dtype=torch.float64)).tolist()
            xt = (st / s0) * self.last - (1 - st) * h1 * m0
            corr = sum(rhos[k] * D1[k] for k in range(len(D1))) if D1 else 0
            x = xt - (1 - st) * B * (corr + rhos[-1] * (m - m0))
        self.ms = (self.ms + [m])[-self.order:]
        p = min(self.order, self.N - i)
        p = min(p, self.done + 1)
        self.p, self.last = p, x
        # predictor
        if self.s[i + 1] == 0:
            xn = m
        else:
            s0, st = self.s[i], self.s[i + 1]
            h = self.lam(i + 1) - self.lam(i)
            hh = -h
            h1, B, b = self._coef(hh, p)
            xn = (st / s0) * x - (1 - st) * h1 * m
            if p >= 2:
                rk = (self.lam(i - 1) - self.lam(i)) / h
                D1 = (self.ms[-2] - m) / rk
                xn = xn - (1 - st) * B * 0.5 * D1
        self.done += 1
        self.i += 1
        return xn


# ------------------------------------------------------------------ VAE

def chan_rms(x, gamma, eps=1e-12):
    """Wan RMS_norm over channels (dim 1)."""
    return F.normalize(x, dim=1, eps=eps) * math.sqrt(x.shape[1]) * gamma


class CConv:
    """Causal 3-D conv with a running history of kt-1 input frames."""

    def __init__(self, w, b, stride_t=1, pad_s=None):
        self.w, self.b = w, b
        self.kt = w.shape[2]
        self.pad = w.shape[3] // 2 if pad_s is None else pad_s
        self.st = stride_t
        self.hist = None

    def reset(self):
        self.hist = None

    def __call__(self, x):
        if x.shape[2] == 1 and (self.kt == 1 or self.hist is None):
            # one frame after zero history: only the kernel's last time slice
            # sees data, a 2-D convolution (the demo training's fast path)
            if self.kt > 1:
                self.hist = torch.cat([x.new_zeros(x.shape[0], x.shape[1], self.kt - 2, x.shape[3], x.shape[4]), x], 2)
            return F.conv2d(x[:, :, 0], self.w[:, :, -1], self.b, padding=self.pad)[:, :, None]
        if self.kt > 1:
            if self.hist is None:
                self.hist = x.new_zeros(x.shape[0], x.shape[1], self.kt - 1, x.shape[3], x.shape[4])
            full = torch.cat([self.hist, x], 2)
            self.hist = full[:, :, -(self.kt - 1):].clone()
        else:
            full = x
        full = F.pad(full, (self.pad, self.pad, self.pad, self.pad, 0, 0))
        return F.conv3d(full, self.w, self.b, stride=(self.st, 1, 1))


class WanVAE:
    """AutoencoderKLWan (is_residual) decoder and encoder, chunked as diffusers."""

    def __init__(self, cfg, w, device, dtype=torch.float32):
        self.cfg = cfg
        self.w = {k: v.to(device=device, dtype=dtype) for k, v in w.items()}
        self.dev, self.dt = device, dtype
        self.convs = {}

    def conv(self, name, **kw):
        if name not in self.convs:
            self.convs[name] = CConv(self.w[name + ".weight"], self.w[name + ".bias"], **kw)
        return self.convs[name]

    def reset(self):
        for c in self.convs.values():
            c.reset()
        self.first_rep = {}

    def res(self, x, pre):
        h = self.conv(pre + ".conv_shortcut")(x) if pre + ".conv_shortcut.weight" in self.w else x
        y = F.silu(chan_rms(x, self.w[pre + ".norm1.gamma"]))
        y = self.conv(pre + ".conv1")(y)
        y = F.silu(chan_rms(y, self.w[pre + ".norm2.gamma"]))
        return self.conv(pre + ".conv2")(y) + h

    def attn(self, x, pre):
        B, C, T, H, W = x.shape
        y = x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W)
        y = chan_rms(y, self.w[pre + ".norm.gamma"])
        qkv = F.conv2d(y, self.w[pre + ".to_qkv.weight"], self.w[pre + ".to_qkv.bias"])
        qkv = qkv.reshape(B * T, 1, 3 * C, H * W).permute(0, 1, 3, 2)
        q, k, v = qkv.chunk(3, dim=-1)
        o = _sdpa(q, k, v)
        o = o.squeeze(1).permute(0, 2, 1).reshape(B * T, C, H, W)
        o = F.conv2d(o, self.w[pre + ".proj.weight"], self.w[pre + ".proj.bias"])
        return o.view(B, T, C, H, W).permute(0, 2, 1, 3, 4) + x

    def mid(self, x, pre):
        x = self.res(x, pre + ".resnets.0")
        x = self.attn(x, pre + ".attentions.0")
        return self.res(x, pre + ".resnets.1")

    def spatial(self, x, fn):
        B, C, T, H, W = x.shape
        y = fn(x.permute(0, 2, 1, 3, 4).reshape(B * T, C, H, W))
        return y.view(B, T, y.shape[1], y.shape[2], y.shape[3]).permute(0, 2, 1, 3, 4)

    # ---- decoder
    def dims_dec(self):
        c = self.cfg
        m = c["dim_mult"]
        base = c.get("decoder_base_dim", c["base_dim"])
        return [base * m[-1]] + [base * u for u in reversed(m)]

    def up_block(self, x, i, first, tup):
        c = self.cfg
        pre = f"decoder.up_blocks.{i}"
        x0 = x
        for r in range(c["num_res_blocks"] + 1):
            x = self.res(x, f"{pre}.resnets.{r}")
        if pre + ".upsampler.resample.1.weight" not in self.w:
            return x
        if tup and not first:
            tc = self.conv(pre + ".upsampler.time_conv", pad_s=0)(x)  # [B, 2C, T, H, W]
            B, C2, T, H, W = tc.shape
            tc = tc.reshape(B, 2, C2 // 2, T, H, W)
            x = torch.stack([tc[:, 0], tc[:, 1]], 3).reshape(B, C2 // 2, T * 2, H, W)
        w, b = self.w[pre + ".upsampler.resample.1.weight"], self.w[pre + ".upsampler.resample.1.bias"]
        x = self.spatial(x, lambda y: F.conv2d(F.interpolate(y, scale_factor=2.0, mode="nearest-exact"), w, b,
                                               padding=1))
        # DupUp3D shortcut
        ft, fs = (2 if tup else 1), 2
        B, Cin, T, H, W = x0.shape
        Co = x.shape[1]
        rep = Co * ft * fs * fs // Cin
        s = x0.repeat_interleave(rep, dim=1).view(B, Co, ft, fs, fs, T, H, W)
        s = s.permute(0, 1, 5, 2, 6, 3, 7, 4).reshape(B, Co, T * ft, H * fs, W * fs)
        if first:
            s = s[:, :, ft - 1:]
        return x + s

    def decode(self, z_norm):
        """z_norm [C, T, h, w] -> clamped video [3, F, H, W]."""
        c = self.cfg
        mean = torch.tensor(c["latents_mean"], dtype=torch.float32, device=self.dev)
        inv_std = 1.0 / torch.tensor(c["latents_std"], dtype=torch.float32, device=self.dev)
        z = (z_norm.float() / inv_std[:, None, None, None] + mean[:, None, None, None])[None]
        return self.decode_raw(z).clamp(-1, 1)[0].float()

    def decode_raw(self, z):
        """Raw latents z [B, C, T, h, w] -> video [B, 3, F, H, W], not clamped."""
        c = self.cfg
        self.reset()
        x = self.conv("post_quant_conv")(z.to(self.dt))
        n = len(c["dim_mult"])
        tup = list(reversed(c["temperal_downsample"]))
        outs = []
        for t in range(x.shape[2]):
            y = self.conv("decoder.conv_in")(x[:, :, t:t + 1])
            y = self.mid(y, "decoder.mid_block")
            for i in range(n):
                y = self.up_block(y, i, t == 0, i < len(tup) and tup[i])
            y = F.silu(chan_rms(y, self.w["decoder.norm_out.gamma"]))
            outs.append(self.conv("decoder.conv_out")(y))
        y = torch.cat(outs, 2)
        p = c["patch_size"]
        B, Cp, Fr, H, W = y.shape
        C = Cp // (p * p)
        return y.view(B, C, p, p, Fr, H, W).permute(0, 1, 4, 5, 3, 6, 2).reshape(B, C, Fr, H * p, W * p)

    # ---- encoder
    def down_block(self, x, i, first, tdown, down):
        c = self.cfg
        pre = f"encoder.down_blocks.{i}"
        x0 = x
        for r in range(c["num_res_blocks"]):
            x = self.res(x, f"{pre}.resnets.{r}")
        if down:
            w, b = self.w[pre + ".downsampler.resample.1.weight"], self.w[pre + ".downsampler.resample.1.bias"]
            x = self.spatial(x, lambda y: F.conv2d(F.pad(y, (0, 1, 0, 1)), w, b, stride=2))
            if tdown:
                key = pre + ".downsampler.time_conv"
                if first:
                    self.first_rep[key] = x[:, :, -1:].clone()
                else:
                    prev = self.first_rep[key]
                    self.first_rep[key] = x[:, :, -1:].clone()
                    tw, tb = self.w[key + ".weight"], self.w[key + ".bias"]
                    x = F.conv3d(torch.cat([prev, x], 2), tw, tb, stride=(2, 1, 1))
        # AvgDown3D shortcut
        ft, fs = (2 if tdown else 1), (2 if down else 1)
        Co = x.shape[1]
        B, C, T, H, W = x0.shape
        pad_t = (ft - T % ft) % ft
        s = F.pad(x0, (0, 0, 0, 0, pad_t, 0))
        T = s.shape[2]
        s = s.view(B, C, T // ft, ft, H // fs, fs, W // fs, fs).permute(0, 1, 3, 5, 7, 2, 4, 6)
        s = s.reshape(B, C * ft * fs * fs, T // ft, H // fs, W // fs)
        s = s.view(B, Co, C * ft * fs * fs // Co, T // ft, H // fs, W // fs).mean(2)
        return x + s

    def encode(self, video):
        """video [3, F, H, W] in [-1, 1] -> (mu, logvar) [z_dim, T, h, w] (raw latent space)."""
        mu, logvar = self.encode_batch(video[None])
        return mu[0].float(), logvar[0].float()

    def encode_batch(self, video):
        """video [B, 3, F, H, W] -> (mu, logvar) [B, z_dim, T, h, w] in the VAE's dtype."""
        c = self.cfg
        p = c["patch_size"]
        B, C, Fr, H, W = video.shape
        x = video.to(self.dt).reshape(B, C, Fr, H // p, p, W // p, p)
        x = x.permute(0, 1, 6, 4, 2, 3, 5).reshape(B, C * p * p, Fr, H // p, W // p)  # (c r q)
        self.reset()
        n = len(c["dim_mult"])
        td = c["temperal_downsample"]
        outs = []
        chunks = [(0, 1)] + [(1 + 4 * (i - 1), 1 + 4 * i) for i in range(1, 1 + (Fr - 1) // 4)]
        for ci, (a, b) in enumerate(chunks):
            y = self.conv("encoder.conv_in")(x[:, :, a:b])
            for i in range(n):
                y = self.down_block(y, i, ci == 0, i != n - 1 and td[i], i != n - 1)
            y = self.mid(y, "encoder.mid_block")
            y = F.silu(chan_rms(y, self.w["encoder.norm_out.gamma"]))
            outs.append(self.conv("encoder.conv_out")(y))
        e = self.conv("quant_conv")(torch.cat(outs, 2))
        z = c["z_dim"]
        return e[:, :z], e[:, z:]


# ---------------------------------------------------------------- check

def rel_l2(a, b):
    a, b = a.double().flatten().cpu(), b.double().flatten().cpu()
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def max_rel(a, b):
    a, b = a.double().flatten().cpu(), b.double().flatten().cpu()
    return float((a - b).abs().max() / max(float(b.abs().max()), 1e-30))


class Checker:
    def __init__(self):
        self.rows, self.bad = [], 0

    def __call__(self, label, got, ref, tol_l2, tol_max=None):
        e, m = rel_l2(got, ref), max_rel(got, ref)
        ok = e <= tol_l2 or (tol_max is not None and m <= tol_max)
        self.bad += not ok
        print(f"  {label:52s} rel L2 {e:.3e}  max rel {m:.3e}  {'ok' if ok else 'FAIL (tol %.0e)' % tol_l2}",
              flush=True)


def cmd_check(a):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(False)
    dev = torch.device(a.device)
    root = os.path.join(a.fixtures, "tiny-a")
    mdir, gdir = os.path.join(root, "model"), os.path.join(root, "golden")
    man = json.load(open(os.path.join(gdir, "manifest.json")))
    c = TConfig(json.load(open(os.path.join(mdir, "transformer", "config.json"))))
    t0 = time.time()
    model = Cosmos3(c, load_folder_tensors(os.path.join(mdir, "transformer")), dev, torch.float32)
    vcfg = json.load(open(os.path.join(mdir, "vae", "config.json")))
    vae = WanVAE(vcfg, load_folder_tensors(os.path.join(mdir, "vae")), dev)
    scfg = json.load(open(os.path.join(mdir, "scheduler", "scheduler_config.json")))
    print(f"loaded tiny-a in {time.time() - t0:.1f} s; fp32 on {dev} (TF32 off)")
    chk = Checker()
    ids = lambda t: [int(x) for x in t.flatten().tolist()]
    T1, T1M, TE2E = 1e-5, 1e-4, 1e-3  # fixtures README: single call rel L2 / max rel; six steps

    print("und_kv (t2i_64):")
    g = st_load(os.path.join(gdir, "und_kv.safetensors"))
    for br in ("cond", "uncond"):
        kv = model.und(ids(g[f"t2i_64.{br}.input_ids"]))
        chk(f"{br} und_k (all layers)", torch.stack([k for k, _ in kv]), g[f"t2i_64.{br}.und_k"], T1, T1M)
        chk(f"{br} und_v (all layers)", torch.stack([v for _, v in kv]), g[f"t2i_64.{br}.und_v"], T1, T1M)

    print("gen_forward:")
    g = st_load(os.path.join(gdir, "gen_forward.safetensors"))
    for case in man["sections"]["gen_forward"]["cases"]:
        n = case["name"]
        lat = g[f"{n}.latents"][0].to(dev)
        for br in ("cond", "uncond"):
            kv = model.und(ids(g[f"{n}.{br}.input_ids"]))
            v = model.gen(kv, lat, case["timestep"], float(case["fps"]))
            chk(f"{n} {br} velocity", v, g[f"{n}.{br}.velocity"][0], T1, T1M)

    print("batched forward (right-padded prompts of two lengths, as the demo training runs it):")
    n = man["sections"]["gen_forward"]["cases"][0]["name"]
    lat = g[f"{n}.latents"][0].to(dev)
    rows = [ids(g[f"{n}.{br}.input_ids"]) for br in ("cond", "uncond")]
    Lm = max(len(r) for r in rows)
    idb = torch.tensor([r + [0] * (Lm - len(r)) for r in rows], device=dev)
    lens = torch.tensor([len(r) for r in rows])
    kvb = model.und_batch(idb)
    tb = torch.tensor([400.0, 900.0])
    vb = model.gen_batch(kvb, torch.stack([lat, -lat]), tb, 24.0, lens=lens)
    for i, r in enumerate(rows):
        v1 = model.gen(model.und(r), lat if i == 0 else -lat, float(tb[i]))
        chk(f"{n} sample {i} (L {len(r)} of {Lm}) batched vs alone", vb[i], v1, T1, T1M)

    print("e2e (UniPC, CFG, 6 steps) and VAE decode of the result:")
    g = st_load(os.path.join(gdir, "e2e.safetensors"))
    for case in man["sections"]["e2e"]["cases"]:
        n, fl = case["name"], case["flags"]
        mode = "karras" if fl.get("use_karras_sigmas") else "native" if fl.get("use_native_flow_schedule") else "linear"
        steps = fl["num_inference_steps"]
        sig, ts = sigma_schedule(scfg, steps, mode, float(fl.get("flow_shift", 1.0)))
        chk(f"{n} sigmas ({mode})", torch.tensor(sig, dtype=torch.float32), g[f"{n}.sigmas"], 1e-7, 1.2e-7)
        tgold = ids(g[f"{n}.timesteps"])
        if ts != tgold:
            chk.bad += 1
            print(f"  {n} timesteps {ts} != golden {tgold}  FAIL")
        gs = float(fl["guidance_scale"])
        kc = model.und(ids(g[f"{n}.cond_input_ids"]))
        ku = model.und(ids(g[f"{n}.uncond_input_ids"])) if gs != 1 else None
        x = g[f"{n}.latents_init"][0].to(dev)
        sch = UniPC(sig, scfg.get("solver_order", 2))
        fps = float(fl.get("fps", 24))
        for i in range(steps):
            vc = model.gen(kc, x, ts[i], fps)
            v = vc if ku is None else (lambda vu: vu + gs * (vc - vu))(model.gen(ku, x, ts[i], fps))
            x = sch.step(v.double(), x.double()).float()
        chk(f"{n} final latents", x, g[f"{n}.latents_final"][0], TE2E)
        chk(f"{n} decoded video (from the golden final latents)", vae.decode(g[f"{n}.latents_final"][0].to(dev)),
            g[f"{n}.decoded"][0], T1, T1M)

    print("vae_decode:")
    g = st_load(os.path.join(gdir, "vae_decode.safetensors"))
    for n in man["sections"]["vae_decode"].get("cases_names", None) or sorted({k.split(".")[0] for k in g}):
        if f"{n}.z_norm" not in g:
            continue
        chk(f"{n} decoded", vae.decode(g[f"{n}.z_norm"][0].to(dev)), g[f"{n}.decoded"][0], T1, T1M)

    print("vae encoder (no golden: the pipeline only encodes zeros for the shape):")
    Fr = 9
    mu, logvar = vae.encode(torch.zeros(3, Fr, 64, 64, device=dev))
    want = (vcfg["z_dim"], 1 + (Fr - 1) // vcfg["scale_factor_temporal"], 64 // vcfg["scale_factor_spatial"],
            64 // vcfg["scale_factor_spatial"])
    ok = tuple(mu.shape) == want and tuple(logvar.shape) == want and bool(torch.isfinite(mu).all())
    chk.bad += not ok
    print(f"  encode zeros [3, {Fr}, 64, 64] -> mu {tuple(mu.shape)} (want {want}), finite: {ok}")
    cond_checks(a, chk, model, vae, vcfg, mdir, root, dev)
    print(f"check: {chk.bad} failed")
    return 1 if chk.bad else 0


def tokenize(cosmos3, mdir, text, negative, W, H, F, fps):
    """Prompt ids exactly as `cosmos3 gen` builds them (templates on)."""
    import subprocess
    cmd = [cosmos3, "tokenize", "-m", mdir, "--templates", "-W", str(W), "-H", str(H), "-F", str(F), "--fps",
           str(fps)] + (["--negative"] if negative else []) + ["--", text]
    return [int(x) for x in subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.split()]


def cond_checks(a, chk, model, vae, vcfg, mdir, root, dev):
    """tiny-a/cond: the encoder (vae_enc_*, and x0 of every conditioned case
    from its cond_pixels) and the first step's velocities with pinned latent
    frames (i2v_*, v2v_*: latents_init, noisy frames only get the timestep,
    pinned velocity zero)."""
    cdir = os.path.join(root, "cond")
    if not os.path.exists(os.path.join(cdir, "cond_manifest.json")):
        print("cond: no tiny-a/cond goldens: skipped")
        return
    man = json.load(open(os.path.join(cdir, "cond_manifest.json")))
    g = st_load(os.path.join(cdir, "cond.safetensors"))
    mean = torch.tensor(vcfg["latents_mean"], device=dev)[:, None, None, None]
    std = torch.tensor(vcfg["latents_std"], device=dev)[:, None, None, None]
    norm = lambda mu: (mu - mean) / std
    T1, T1M = 1e-5, 1e-4
    print("cond: the Wan2.2 encoder (normalised mean) and pinned-frame forwards:")
    for n, cs in man["cases"].items():
        if cs.get("kind") == "vae_encode":
            mu, _ = vae.encode(g[f"{n}.pixels"][0].to(dev))
            chk(f"{n} encoder latents", norm(mu), g[f"{n}.latents"][0], T1, T1M)
    have_bin = a.cosmos3 and os.path.exists(a.cosmos3)
    for n, cs in man["cases"].items():
        if cs.get("kind") not in ("i2v", "v2v"):
            continue
        mu, _ = vae.encode(g[f"{n}.cond_pixels"][0].to(dev))
        chk(f"{n} x0 (encode of cond_pixels)", norm(mu), g[f"{n}.x0"][0], T1, T1M)
        if not have_bin:
            print(f"  {n} step-0 velocities: no --cosmos3 binary for the prompt ids: skipped")
            continue
        W, H, F, fps = cs["width"], cs["height"], cs["num_frames"], float(cs["fps"])
        noisy = (g[f"{n}.mask"] < 0.5)[None].to(dev)  # [1, T]
        lat = g[f"{n}.latents_init"].to(dev)
        t0 = float(g[f"{n}.timesteps"][0])
        for br, key, neg in (("cond", "prompt", False), ("uncond", "negative_prompt", True)):
            ids = tokenize(a.cosmos3, mdir, cs.get(key) or "", neg, W, H, F, cs["fps"])
            kv = model.und_batch(torch.tensor([ids], device=dev))
            v = model.gen_batch(kv, lat, torch.tensor([t0], device=dev), fps, noisy=noisy)
            chk(f"{n} step-0 {br} velocity (pinned {cs['conditioned_latent_frames']})", v[0],
                g[f"{n}.step0_{br}_velocity"][0], T1, T1M)


# ---------------------------------------------------------------- bench

NANO = dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
            intermediate_size=12288, hidden_act="silu", rope_theta=5e6,
            rope_scaling={"mrope_section": [24, 20, 20], "mrope_interleaved": True})
SIZES = {"t2i": (1024, 1024, 1), "480p": (832, 480, 93), "720p": (1280, 720, 189)}
PEAK = 989.0


def random_gen_weights(c, dev, dt):
    D, I, Q, KV, P = c.D, c.I, c.Hq * c.hd, c.Hkv * c.hd, c.p * c.p * c.C
    r = lambda *s: torch.randn(*s, device=dev, dtype=dt) * (1.0 / math.sqrt(s[-1]))
    one = lambda n: 1 + 0.1 * torch.randn(n, device=dev, dtype=dt)
    w = {"proj_in.weight": r(D, P), "proj_in.bias": 0.1 * torch.randn(D, device=dev, dtype=dt),
         "proj_out.weight": r(P, D), "proj_out.bias": 0.1 * torch.randn(P, device=dev, dtype=dt),
         "time_embedder.linear_1.weight": r(D, 256).float(), "time_embedder.linear_1.bias": torch.zeros(D, device=dev),
         "time_embedder.linear_2.weight": r(D, D).float(), "time_embedder.linear_2.bias": torch.zeros(D, device=dev),
         "norm_moe_gen.weight": one(D)}
    for l in range(c.layers):
        p = f"layers.{l}."
        w[p + "input_layernorm_moe_gen.weight"] = one(D)
        w[p + "post_attention_layernorm_moe_gen.weight"] = one(D)
        w[p + "self_attn.add_q_proj.weight"] = r(Q, D)
        w[p + "self_attn.add_k_proj.weight"] = r(KV, D)
        w[p + "self_attn.add_v_proj.weight"] = r(KV, D)
        w[p + "self_attn.to_add_out.weight"] = r(D, Q)
        w[p + "self_attn.norm_added_q.weight"] = one(c.hd)
        w[p + "self_attn.norm_added_k.weight"] = one(c.hd)
        w[p + "mlp_moe_gen.gate_proj.weight"] = r(I, D)
        w[p + "mlp_moe_gen.up_proj.weight"] = r(I, D)
        w[p + "mlp_moe_gen.down_proj.weight"] = r(D, I)
    return w


def step_flops(c, S, Lc, Lu):
    Q, KV = c.Hq * c.hd, c.Hkv * c.hd
    wt = c.layers * (c.D * Q * 2 + 2 * c.D * KV + (3 if c.gated else 2) * c.D * c.I) + 2 * c.D * c.p * c.p * c.C
    lin = 2 * 2 * wt * S
    att = sum(4.0 * S * (L + S) * c.Hq * c.hd * c.layers for L in (Lc, Lu))
    return lin, att


def cuda_time(fn, reps, warm=1):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def cmd_bench(a):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    dev, dt = torch.device("cuda"), torch.bfloat16
    cfg = dict(NANO)
    if a.layers:
        cfg["num_hidden_layers"] = a.layers
    c = TConfig(cfg)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name(0)}")
    results = {"torch": torch.__version__, "layers": c.layers, "sizes": {}, "attention": [], "matmul": []}
    global sdpa
    gqa_native = True
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        try:
            q = torch.randn(1, 32, 256, 128, device=dev, dtype=dt)
            k = torch.randn(1, 8, 300, 128, device=dev, dtype=dt)
            F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
        except Exception as e:  # cuDNN without native GQA: K/V repeated to the q heads
            gqa_native = False
            print(f"cuDNN SDPA: enable_gqa refused ({type(e).__name__}); K/V are repeated to 32 heads")

    def sdpa_fast(q, k, v, causal, backend=None):
        qh, kh, vh = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
        if gqa_native:
            o = F.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, enable_gqa=True)
        else:
            g = q.shape[1] // k.shape[1]
            o = F.scaled_dot_product_attention(qh, kh.repeat_interleave(g, 1), vh.repeat_interleave(g, 1),
                                               is_causal=causal)
        return o[0].transpose(0, 1)

    sdpa = sdpa_fast
    torch.manual_seed(0)
    model = Cosmos3(c, random_gen_weights(c, dev, dt), dev, dt)
    torch.cuda.synchronize()
    kv = {L: [(torch.randn(L, c.Hkv, c.hd, device=dev, dtype=dt), torch.randn(L, c.Hkv, c.hd, device=dev, dtype=dt))
              for _ in range(c.layers)] for L in (a.lc, a.lu)}
    with torch.no_grad(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for name in a.sizes.split(","):
            W, H, Fr = SIZES[name]
            T, h, w = (Fr - 1) // 4 + 1, H // 16, W // 16
            S = T * (-(-h // c.p)) * (-(-w // c.p))
            lat = torch.randn(c.C, T, h, w, device=dev)
            step = lambda: (model.gen(kv[a.lc], lat, 500), model.gen(kv[a.lu], lat, 500))
            torch.cuda.reset_peak_memory_stats()
            med, best = cuda_time(step, a.reps if S < 20000 else max(2, a.reps // 2))
            lin, att = step_flops(c, S, a.lc, a.lu)
            tf = (lin + att) / med / 1e12
            r = dict(width=W, height=H, frames=Fr, S=S, step_s=med, step_best_s=best, tflop=(lin + att) / 1e12,
                     tflops=tf, mfu=tf / PEAK, peak_gib=torch.cuda.max_memory_allocated() / 2 ** 30)
            results["sizes"][name] = r
            print(f"torch CFG step {name:5s} {W}x{H}x{Fr} S {S:6d}: {med * 1e3:9.2f} ms (best {best * 1e3:.2f}), "
                  f"{r['tflop']:.1f} TFLOP, {tf:.1f} TF/s, MFU {tf / PEAK:.3f}, peak {r['peak_gib']:.1f} GiB",
                  flush=True)
        # attention alone, GEN shapes
        for S in [int(x) for x in a.attn_s.split(",")]:
            L = a.lc
            q = torch.randn(1, c.Hq, S, c.hd, device=dev, dtype=dt)
            k = torch.randn(1, c.Hkv, L + S, c.hd, device=dev, dtype=dt)
            v = torch.randn_like(k)
            if gqa_native:
                fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            else:
                kr, vr = k.repeat_interleave(4, 1), v.repeat_interleave(4, 1)
                fn = lambda: F.scaled_dot_product_attention(q, kr, vr)
            med, _ = cuda_time(fn, 10 if S < 20000 else 5)
            tf = 4.0 * S * (L + S) * c.Hq * c.hd / med / 1e12
            results["attention"].append(dict(S=S, keys=L + S, ms=med * 1e3, tflops=tf))
            print(f"cuDNN SDPA  Sq {S:6d} keys {L + S:6d} H 32/8 D 128: {med * 1e3:8.3f} ms {tf:6.1f} TF/s", flush=True)
        # matrix products at the model's shapes (M = 9,360 tokens)
        M = 9360
        for nm, N, K in (("q/out", 4096, 4096), ("k/v", 1024, 4096), ("gate/up", 12288, 4096), ("down", 4096, 12288)):
            x = torch.randn(M, K, device=dev, dtype=dt)
            wt = torch.randn(N, K, device=dev, dtype=dt)
            med, _ = cuda_time(lambda: x @ wt.t(), 20)
            tf = 2.0 * M * N * K / med / 1e12
            results["matmul"].append(dict(name=nm, M=M, N=N, K=K, ms=med * 1e3, tflops=tf))
            print(f"torch matmul {nm:8s} M {M} N {N:5d} K {K:5d}: {med * 1e3:7.3f} ms {tf:6.1f} TF/s", flush=True)
    if a.json_out:
        json.dump(results, open(a.json_out, "w"), indent=1)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="fp32 against every tiny-a golden")
    c.add_argument("--fixtures", default=os.environ.get("COSMOS3_FIXTURES", "../shared/fixtures"))
    c.add_argument("--device", default="cpu")
    c.add_argument("--cosmos3", default=os.environ.get("COSMOS3_BIN", "build/cosmos3"),
                   help="for the conditioned goldens' prompt ids (cosmos3 tokenize)")
    b = sub.add_parser("bench", help="bf16 Nano GEN CFG step + attention on the GPU")
    b.add_argument("--sizes", default="t2i,480p")
    b.add_argument("--layers", type=int, default=0)
    b.add_argument("--lc", type=int, default=120, help="cond prompt length L")
    b.add_argument("--lu", type=int, default=60, help="uncond prompt length L")
    b.add_argument("--reps", type=int, default=5)
    b.add_argument("--attn-s", default="1024,4096,9360,16384,44160")
    b.add_argument("--json-out", default="")
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    return cmd_check(a) if a.cmd == "check" else cmd_bench(a)


if __name__ == "__main__":
    sys.exit(main())
