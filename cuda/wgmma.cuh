/* wgmma.cuh - the accumulator operands of the warpgroup matrix products
 * (sm_90a wgmma.mma_async) that the attention and VAE kernels issue in
 * inline PTX: a 64 x N fp32 accumulator is N / 2 registers a thread,
 * %0 .. %(N/2 - 1) in the instruction's text, bound in order as "+f"(d[i]).
 * C3_WG_D32/64/88/128(d): that operand list for N = 64, 128, 176, 256. */
#ifndef COSMOS3_WGMMA_CUH
#define COSMOS3_WGMMA_CUH

#define C3_WG_F8(d, i)                                                                             \
    "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]),      \
        "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define C3_WG_D32(d) C3_WG_F8(d, 0), C3_WG_F8(d, 8), C3_WG_F8(d, 16), C3_WG_F8(d, 24)
#define C3_WG_D64(d)                                                                               \
    C3_WG_D32(d), C3_WG_F8(d, 32), C3_WG_F8(d, 40), C3_WG_F8(d, 48), C3_WG_F8(d, 56)
#define C3_WG_D88(d) C3_WG_D64(d), C3_WG_F8(d, 64), C3_WG_F8(d, 72), C3_WG_F8(d, 80)
#define C3_WG_D128(d)                                                                              \
    C3_WG_D64(d), C3_WG_F8(d, 64), C3_WG_F8(d, 72), C3_WG_F8(d, 80), C3_WG_F8(d, 88),              \
        C3_WG_F8(d, 96), C3_WG_F8(d, 104), C3_WG_F8(d, 112), C3_WG_F8(d, 120)

#endif
