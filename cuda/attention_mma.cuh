/* attention_mma.cuh - the mma.sync flash-attention kernel att_mma<D> (bf16,
 * head_dim D in {16, 32, 64, 128}, causal or not, several key segments; see
 * attention.cu) and its argument struct: included by cuda/attention.cu, which
 * launches it, and by cuda/lab/attention_lab.cu, which checks and times it as
 * v1 beside the Hopper kernels. The includer defines ATT_MAX_SEG and includes
 * cuda.h / cuda_bf16.h. */
#ifndef C3_ATTENTION_MMA_CUH
#define C3_ATTENTION_MMA_CUH

#ifndef ATT_MAX_SEG
#error "define ATT_MAX_SEG before including attention_mma.cuh"
#endif

#define ATT_WARPS 4
#define ATT_BQ (16 * ATT_WARPS) /* queries per block: 16 rows per warp */
#define ATT_BK 64               /* keys per shared-memory tile */
#define ATT_PAD 8               /* bf16 row padding: rows shift by 4 banks */

typedef struct {
    const void *q; /* [Sq, Hq, D] */
    void *out;     /* [Sq, Hq, D] */
    int qt, ot;    /* dtypes (generic kernel) */
    int64_t Sq;
    int Hq, Hkv, D;
    int nseg;
    const void *k[ATT_MAX_SEG], *v[ATT_MAX_SEG]; /* [n, Hkv, D] */
    int kt[ATT_MAX_SEG], vt[ATT_MAX_SEG];
    int64_t n[ATT_MAX_SEG], valid[ATT_MAX_SEG], start[ATT_MAX_SEG];
    int causal;
    int64_t causal_off; /* query i sees global key j <= i + causal_off */
    float scale_log2;   /* softmax scale times log2(e): exp2 replaces exp */
} att_args;

static __device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); /* .x = lo (lower address / lower k) */
    return *(uint32_t *)&h;
}
static __device__ __forceinline__ uint32_t pack_raw(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}

/* Fragment layout of m16n8k16 (g = lane / 4, t = lane % 4):
 *   A 16x16 row-major: a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
 *   B 16x8 (k x n):    b0 (k = 2t..2t+1, n = g)  b1 (k = 2t+8.., n = g)
 *   C 16x8:            c0,c1 (g, 2t..2t+1)       c2,c3 (g+8, 2t..2t+1) */
template <int D>
__global__ void __launch_bounds__(ATT_WARPS * 32) att_mma(att_args a) {
    constexpr int KS = D / 16; /* k-steps over head_dim */
    constexpr int DT = D / 8;  /* n-tiles over head_dim */
    constexpr int NT = ATT_BK / 8;
    constexpr int LD = D + ATT_PAD;
    extern __shared__ __align__(16) unsigned char att_smem[];
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)att_smem; /* [ATT_BK][LD] */
    __nv_bfloat16 *Vs = Ks + ATT_BK * LD;          /* [ATT_BK][LD] */

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y, hk = h / (a.Hq / a.Hkv);
    const int64_t qblk = (int64_t)blockIdx.x * ATT_BQ;
    const int64_t r0 = qblk + warp * 16 + g, r1 = r0 + 8; /* this lane's two query rows */
    const int64_t qstride = (int64_t)a.Hq * D, kstride = (int64_t)a.Hkv * D;
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)a.q;

    uint32_t qa[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        const int c = kk * 16 + 2 * t;
        qa[kk][0] = r0 < a.Sq ? *(const uint32_t *)(q + r0 * qstride + h * D + c) : 0u;
        qa[kk][1] = r1 < a.Sq ? *(const uint32_t *)(q + r1 * qstride + h * D + c) : 0u;
        qa[kk][2] = r0 < a.Sq ? *(const uint32_t *)(q + r0 * qstride + h * D + c + 8) : 0u;
        qa[kk][3] = r1 < a.Sq ? *(const uint32_t *)(q + r1 * qstride + h * D + c + 8) : 0u;
    }
    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int64_t qlast = (qblk + ATT_BQ < a.Sq ? qblk + ATT_BQ : a.Sq) - 1;

    for (int sg = 0; sg < a.nseg; sg++) {
        const __nv_bfloat16 *kp = (const __nv_bfloat16 *)a.k[sg], *vp = (const __nv_bfloat16 *)a.v[sg];
        const int64_t n = a.n[sg], valid = a.valid[sg], start = a.start[sg];
        for (int64_t k0 = 0; k0 < valid; k0 += ATT_BK) {
            if (a.causal && start + k0 > qlast + a.causal_off) break; /* block-uniform */
            __syncthreads(); /* the previous tile is no longer read */
            constexpr int CH = D / 8; /* 16-byte chunks per row */
            for (int i = threadIdx.x; i < ATT_BK * CH; i += ATT_WARPS * 32) {
                int r = i / CH, c = (i % CH) * 8;
                int64_t j = k0 + r;
                uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
                if (j < n) {
                    kv = *(const uint4 *)(kp + j * kstride + hk * D + c);
                    vv = *(const uint4 *)(vp + j * kstride + hk * D + c);
                }
                *(uint4 *)(Ks + r * LD + c) = kv;
                *(uint4 *)(Vs + r * LD + c) = vv;
            }
            __syncthreads();

            /* S = Q K^T for 16 rows x 64 keys */
            float s[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
                const __nv_bfloat16 *kr = Ks + (nt * 8 + g) * LD + 2 * t;
#pragma unroll
                for (int kk = 0; kk < KS; kk++)
                    mma_bf16(s[nt], qa[kk], *(const uint32_t *)(kr + kk * 16), *(const uint32_t *)(kr + kk * 16 + 8));
            }
            /* scale, mask, row max */
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int64_t j = k0 + nt * 8 + 2 * t + (e & 1);
                    int64_t row = (e < 2) ? r0 : r1;
                    bool ok = j < valid && (!a.causal || start + j <= row + a.causal_off);
                    float v = ok ? s[nt][e] * a.scale_log2 : -INFINITY;
                    s[nt][e] = v;
                    mx[e >> 1] = fmaxf(mx[e >> 1], v);
                }
            float alpha[2], mu[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                float mn = fmaxf(m[r], mx[r]);
                mu[r] = mn == -INFINITY ? 0.0f : mn; /* a row with nothing visible yet */
                alpha[r] = exp2f(m[r] - mu[r]);
                m[r] = mn;
                l[r] *= alpha[r];
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = exp2f(s[nt][e] - mu[e >> 1]);
                    s[nt][e] = p;
                    l[e >> 1] += p;
                }
#pragma unroll
            for (int i = 0; i < DT; i++) {
                o[i][0] *= alpha[0], o[i][1] *= alpha[0];
                o[i][2] *= alpha[1], o[i][3] *= alpha[1];
            }
            /* O += P V: the score C-fragments are the A-fragments of P */
#pragma unroll
            for (int kk = 0; kk < ATT_BK / 16; kk++) {
                uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                  pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                  pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
                const __nv_bfloat16 *v0 = Vs + (kk * 16 + 2 * t) * LD + g;
#pragma unroll
                for (int i = 0; i < DT; i++) {
                    const __nv_bfloat16 *vc = v0 + i * 8;
                    uint32_t b0 = pack_raw(vc[0], vc[LD]);
                    uint32_t b1 = pack_raw(vc[8 * LD], vc[9 * LD]);
                    mma_bf16(o[i], pa, b0, b1);
                }
            }
        }
    }
    /* finish: full row sums across the quad, normalise, store bf16 */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        l[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
    __nv_bfloat16 *out = (__nv_bfloat16 *)a.out;
#pragma unroll
    for (int i = 0; i < DT; i++) {
        const int c = i * 8 + 2 * t;
        if (r0 < a.Sq) *(uint32_t *)(out + r0 * qstride + h * D + c) = pack_bf16(o[i][0] * l[0], o[i][1] * l[0]);
        if (r1 < a.Sq) *(uint32_t *)(out + r1 * qstride + h * D + c) = pack_bf16(o[i][2] * l[1], o[i][3] * l[1]);
    }
}

#endif
