/* bench.h - `cosmos3 bench`: time the GEN CFG step of a preset's geometry
 * on random weights, with no checkpoint on disk. The measurement is the
 * library's cosmos3_bench (include/cosmos3.h says what it runs and counts);
 * this front end parses the options, times the PNG encode of the decoded
 * first frame and prints the report (text, or one JSON object with --json).
 */
#ifndef COSMOS3_BENCH_H
#define COSMOS3_BENCH_H

#include "cosmos3_tools.h"
#include "options.h"

/* Run `cosmos3 bench` with parsed settings; prints the report on stdout.
 * Errors are returned with c3_fail(). */
int cmd_bench(c3_settings *s, char **pos, int npos);

#endif
