/* bench.h - `cosmos3 bench`: time the GEN CFG step of a preset's geometry
 * on random weights, with no checkpoint on disk.
 *
 * The transformer checkpoint is built in memory: the configuration comes from
 * the mkmodel preset table (mkmodel.h), and every tensor of the Diffusers
 * layout points into one shared random bf16 buffer as large as the largest
 * tensor (the values do not matter for timing), so model_load runs unchanged.
 * Then: tokenize the prompt (cond and uncond), run the UND tower once per
 * branch, one warm-up CFG step, `steps` timed CFG steps (cond + uncond GEN
 * calls), and one profiled step in which a wrapper backend synchronises
 * around every backend call and times matrix products (linear), attention
 * and the rest. FLOPs are counted as ../shared/PERF-TARGETS.md says: 2 x
 * weights applied per token x tokens for the linears plus 4 x S x (L + S) x
 * Hq x head_dim per GEN layer for attention (2 x L^2 x Hq x head_dim per
 * causal UND layer). MFU is against C3_BENCH_PEAK_TFLOPS (H200 dense bf16).
 * Time outside the loop is reported separately: tokenize, load, UND, and
 * (unless --skip-vae) a VAE decode of that size on a random VAE of the
 * preset's geometry (written by mkmodel into a temporary folder) and a PNG
 * write of the first frame.
 */
#ifndef COSMOS3_BENCH_H
#define COSMOS3_BENCH_H

#include "options.h"

/* H200 dense bf16 peak, TFLOP/s (../shared/PERF-TARGETS.md). */
#define C3_BENCH_PEAK_TFLOPS 989.0

/* Run `cosmos3 bench` with parsed settings; prints the report (text, or one
 * JSON object with --json) on stdout. Errors are returned with c3_fail(). */
int cmd_bench(c3_settings *s, char **pos, int npos);

#endif
