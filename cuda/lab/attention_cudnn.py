"""attention_cudnn.py - time torch SDPA (cuDNN backend, bf16) on the GEN shapes
that cuda/lab/attention_lab.cu times, for the side-by-side ratio of issue 7.

Layout as cosmos3 holds it: q [S, 32, 128], k/v [L + S, 8, 128]; SDPA sees
[1, H, S, D] views. GQA: enable_gqa=True when the backend takes it, else the
KV heads are repeated once before timing (not counted). Median of CUDA-event
timings after warm-up. TF/s counts 4 * S * (L + S) * 32 * 128.
Usage: python3 cuda/lab/attention_cudnn.py [S ...]"""
import sys
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

L, HQ, HKV, D = 300, 32, 8, 128


def median_ms(fn, reps):
    for _ in range(2):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    sizes = [int(x) for x in sys.argv[1:]] or [1024, 4096, 9360, 16384, 44160]
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    g = torch.Generator(device="cuda").manual_seed(1)
    for S in sizes:
        q = torch.randn(S, HQ, D, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(L + S, HKV, D, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(L + S, HKV, D, device="cuda", dtype=torch.bfloat16, generator=g)
        qh, kh, vh = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))  # [1, H, S, D] views
        flop = 4.0 * S * (L + S) * HQ * D
        reps = 5 if S > 20000 else 10
        for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)):
            how = "gqa"
            try:
                with sdpa_kernel([be]):
                    fn = lambda: F.scaled_dot_product_attention(qh, kh, vh, enable_gqa=True)
                    fn()
            except Exception:
                how = "repeat"
                kr = kh.repeat_interleave(HQ // HKV, dim=1)
                vr = vh.repeat_interleave(HQ // HKV, dim=1)
                try:
                    with sdpa_kernel([be]):
                        fn = lambda: F.scaled_dot_product_attention(qh, kr, vr)
                        fn()
                except Exception as e:
                    print(f"  S {S:6d} L {L} | {name:6s} unavailable: {str(e).splitlines()[0][:80]}")
                    continue
            with sdpa_kernel([be]):
                ms = median_ms(fn, reps)
            print(f"  S {S:6d} L {L} | {name:6s} ({how:6s}) {ms:9.3f} ms {flop / ms * 1e-9:7.1f} TF/s", flush=True)
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
