/* env.h - the environment settings cosmos3 reads, in one table.
 *
 * c3_env_docs (env.c) names every variable the library, the CUDA module and
 * the applications read, with the man page's paragraph for it: `cosmos3
 * __man-environment` prints the ENVIRONMENT section from it (man/cosmos3.1.in,
 * tests/test_docs.sh), as the options table makes OPTIONS.
 *
 * The library's values are read once, on the first c3_env() call, into one
 * struct; the code reads them from there (the CUDA module through the same
 * struct, cuda_module.h). A test that changes a variable with setenv()
 * calls c3_env_reload() after it.
 */
#ifndef COSMOS3_ENV_H
#define COSMOS3_ENV_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    bool cfg_batch;            /* COSMOS3_CFG_BATCH (off: "0") */
    const char *comm;          /* COSMOS3_COMM ("device", or NULL) */
    double comm_timeout;       /* COSMOS3_COMM_TIMEOUT (seconds > 0; default 600) */
    const char *cuda_module;   /* COSMOS3_CUDA_MODULE (NULL: unset; "": no module) */
    bool cuda_fp32;            /* COSMOS3_CUDA_FP32 (on: set, not empty, not "0") */
    int fp8_calibrate;         /* COSMOS3_FP8_CALIBRATE (>= 0; 0: per call) */
    bool graphs;               /* COSMOS3_GRAPHS (off: "0") */
    const char *hostname;      /* COSMOS3_HOSTNAME (NULL: gethostname's) */
    const char *model;         /* COSMOS3_MODEL (NULL when unset or empty) */
    bool pinned_load;          /* COSMOS3_PINNED_LOAD (off: "0") */
    int64_t pinned_slot_bytes; /* COSMOS3_PINNED_SLOT_BYTES (0: the default) */
    bool prefault;             /* COSMOS3_PREFAULT (off: "0") */
    bool vae_cl;               /* COSMOS3_VAE_CL (off: "0") */
    int vcl_conv;              /* COSMOS3_VCL_CONV (0: by shape, 1..6: a variant) */
    int vcl_wgmma;             /* COSMOS3_VCL_WGMMA (-1: unset, 0 or 1) */
} c3_env_values;

/* The library's settings, read on the first call. */
const c3_env_values *c3_env(void);
/* Read the variables again (after a test's setenv; not while other threads
 * read them). */
void c3_env_reload(void);

/* The documented variables, by name: entry i's name and its mdoc paragraph
 * in *help; NULL past the last. (app/util.h declares it too.) */
const char *c3_env_doc(int i, const char **help);

#endif
