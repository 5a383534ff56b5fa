/* env.c - the environment settings: the documented table and the library's
 * values, read once (env.h). */
#include "env.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Name and the man page's paragraph (mdoc), sorted by name. */
static const struct {
    const char *name, *help;
} docs[] = {
    /* clang-format off */
    {"COSMOS3_API_KEY",
     "The key\n"
     ".Cm serve\n"
     "requires when\n"
     ".Fl \\-api\\-key\n"
     "is not given.\n"},
    {"COSMOS3_CFG_BATCH",
     "When 0, the two classifier\\-free\\-guidance branches run one after the other.\n"
     "By default a rank that computes both (no\n"
     ".Fl \\-cfg\\-parallel ,\n"
     "no\n"
     ".Fl \\-ulysses )\n"
     "runs them as one batch: every matrix product of the GEN tower reads its\n"
     "weights once for both; attention runs per branch.\n"
     "The plan turns the batch off when its doubled activations would not fit.\n"
     "Batched, the TUI and events show half the batch's time for each branch.\n"},
    {"COSMOS3_COMM",
     "When\n"
     ".Cm device ,\n"
     "CUDA ranks on distinct GPUs exchange through the device\\-memory communicator\n"
     "(stream\\-ordered peer copies) instead of NCCL, for comparisons;\n"
     "ranks that share a GPU always do.\n"},
    {"COSMOS3_COMM_TIMEOUT",
     "Seconds a collective between processes waits for the others before the run\n"
     "fails (default 600); see\n"
     ".Sx PROCESSES .\n"},
    {"COSMOS3_CUDA_FP32",
     "When 1, the CUDA backend keeps weights and activations in fp32 with TF32\n"
     "off: a check path that matches the CPU backend to about 1e\\-6.\n"},
    {"COSMOS3_CUDA_MODULE",
     "The CUDA backend module to open, instead of\n"
     ".Pa libcosmos3\\-cuda.so\n"
     "beside the library, beside the program, then in the library folder it was\n"
     "installed to.\n"
     "It is opened when a GPU is first looked for; empty: no module, and the CPU\n"
     "runs as on a machine without the CUDA libraries.\n"
     "A module that is missing or cannot be opened is named on the\n"
     ".Sq device:\n"
     "line, and the CPU runs.\n"},
    {"COSMOS3_FP8_CALIBRATE",
     "With\n"
     ".Fl \\-precision Cm fp8\n"
     "(weights quantised at load, no calibrated input scales), the scale of the\n"
     "activations entering each FP8 matrix product is by default taken from their\n"
     "own max |x| / 448 on every call.\n"
     "When N > 0, the first N calls of each weight set a static scale (the max over\n"
     "them; the first denoising step for N = 1) and later calls quantise with it,\n"
     "skipping that pass.\n"
     "With CUDA graphs (recorded on the second step) use N = 1.\n"},
    {"COSMOS3_GRAPHS",
     "When 0, no CUDA graphs: every operation of the GEN layer loop and of an\n"
     "image's VAE decode is queued one by one (by default each is recorded once and\n"
     "replayed; the results are the same bit for bit).\n"},
    {"COSMOS3_HOSTNAME",
     "The host name this process reports to the others of a run across processes\n"
     "instead of its own (tests stand in several hosts on one machine with it);\n"
     "the plan keeps TP and Ulysses groups inside one host name; see\n"
     ".Sx PROCESSES .\n"},
    {"COSMOS3_MODEL",
     "The model folder, or the name of a built\\-in model, when\n"
     ".Fl m\n"
     "is not given.\n"},
    {"COSMOS3_PINNED_LOAD",
     "When 0, weights that need no conversion (bf16 on a bf16 device, FP8 codes) go\n"
     "to the GPU as one copy from the mapping each (pageable memory, staged by the\n"
     "driver) instead of through the default ring of four pinned 64 MiB buffers,\n"
     "filled from the checkpoint by several threads while the previous ones are\n"
     "copied; the weights are the same bit for bit either way.\n"},
    {"COSMOS3_PINNED_SLOT_BYTES",
     "The size of each pinned buffer of the upload ring (bytes, at least 16;\n"
     "default 64 MiB).\n"},
    {"COSMOS3_PREFAULT",
     "When 0, the checkpoint's shards are not prefaulted while the backends start:\n"
     "the loader maps each page as it first reads it (the comparison for the load's\n"
     "phases; the weights are the same bit for bit).\n"
     "Files larger than half the memory are never prefaulted.\n"},
    {"COSMOS3_VAE_CL",
     "When 0, the VAE decodes through the backend's channels\\-first operations\n"
     "instead of the channels\\-last ones a bf16 GPU has (for comparisons).\n"},
    {"COSMOS3_VCL_CONV",
     "N from 1 to 6: the channels\\-last VAE convolution kernel to prefer where\n"
     "it applies (cuda/vae_cl.cu); 0 or unset: chosen by the shape.\n"},
    {"COSMOS3_VCL_WGMMA",
     "When 0, the channels\\-last VAE convolution does not choose the Hopper wgmma\n"
     "kernels by itself (by default it does where the GPU has them).\n"},
    {"COSMOS3_WRITE_THREADS",
     "How many threads encode and write a video's PNG frames (1: one after the\n"
     "other; by default the online cores, at most 16).\n"},
    {"CUDA_VISIBLE_DEVICES",
     "The GPUs the CUDA runtime shows;\n"
     ".Fl \\-gpus\n"
     "numbers count within them.\n"},
    {"NCCL_*",
     "NCCL settings for multi\\-GPU runs; keep\n"
     ".Ev NCCL_NVLS_ENABLE Ns =0\n"
     "on machines where NVLink multicast is not wanted.\n"},
    {"NO_COLOR",
     "When set, no colours are used.\n"},
    {"OMP_NUM_THREADS",
     "CPU threads when\n"
     ".Fl \\-threads\n"
     "is 0.\n"},
    /* clang-format on */
};

const char *c3_env_doc(int i, const char **help) {
    if (i < 0 || i >= (int)(sizeof docs / sizeof docs[0])) return NULL;
    if (help) *help = docs[i].help;
    return docs[i].name;
}

static c3_env_values g_env;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* "0" turns a default-on setting off */
static bool on_unless_0(const char *name) {
    const char *v = getenv(name);
    return !(v && !strcmp(v, "0"));
}

static const char *text(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

void c3_env_reload(void) {
    c3_env_values e = {0};
    e.cfg_batch = on_unless_0("COSMOS3_CFG_BATCH");
    e.comm = text("COSMOS3_COMM");
    const char *ct = text("COSMOS3_COMM_TIMEOUT");
    e.comm_timeout = ct && atof(ct) > 0 ? atof(ct) : 600;
    e.cuda_module = getenv("COSMOS3_CUDA_MODULE");
    const char *v = text("COSMOS3_CUDA_FP32");
    e.cuda_fp32 = v && strcmp(v, "0") != 0;
    v = text("COSMOS3_FP8_CALIBRATE");
    e.fp8_calibrate = v && atoi(v) > 0 ? atoi(v) : 0;
    e.graphs = on_unless_0("COSMOS3_GRAPHS");
    e.hostname = text("COSMOS3_HOSTNAME");
    e.model = text("COSMOS3_MODEL");
    e.pinned_load = on_unless_0("COSMOS3_PINNED_LOAD");
    v = text("COSMOS3_PINNED_SLOT_BYTES");
    long long sb = v ? atoll(v) : 0;
    e.pinned_slot_bytes = sb >= 16 ? sb : 0;
    e.prefault = on_unless_0("COSMOS3_PREFAULT");
    e.vae_cl = on_unless_0("COSMOS3_VAE_CL");
    v = text("COSMOS3_VCL_CONV");
    e.vcl_conv = v ? atoi(v) : 0;
    v = text("COSMOS3_VCL_WGMMA");
    e.vcl_wgmma = v ? strcmp(v, "0") != 0 : -1;
    g_env = e;
}

static void env_once(void) {
    c3_env_reload();
}

const c3_env_values *c3_env(void) {
    pthread_once(&g_once, env_once);
    return &g_env;
}
