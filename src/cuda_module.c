/* cuda_module.c - the library's side of the CUDA module (cuda_module.h):
 * c3_backend_cuda, the GPU queries and the GPU communicators open
 * libcosmos3-cuda.so on the first call and forward to it. Without the
 * module (not built, not installed, or it cannot be opened: the CUDA
 * libraries missing) every call answers as a machine without GPUs does,
 * with the reason, which the plan puts on its one "device:" line. */
#include "cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "comm.h"
#include "config.h"

#define NO_CUDA_BUILD "this cosmos3 was built without CUDA"
#define NO_CUDA_FIX NO_CUDA_BUILD "; rebuild with -Dcuda=enabled"

/* the library's half of the handshake */
static const c3_cuda_host host = {
    .abi = C3_CUDA_MODULE_ABI,
    .version = COSMOS3_VERSION,
    .backend_size = sizeof(c3_backend),
    .tensor_size = sizeof(c3_tensor),
    .plan_size = sizeof(c3_plan),
    .fail = c3_fail,
    .dtype_size = c3_dtype_size,
    .dtype_name = c3_dtype_name,
    .calloc_at = c3_xcalloc_,
    .env = c3_env,
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const c3_cuda_module *mod; /* NULL: no module, why says so */
static char why[256];
static char mod_path[PATH_MAX];

/* dir/libcosmos3-cuda.so when it exists, into mod_path; dir_of is a file in
 * that folder (the library, the program). */
static bool beside(const char *dir_of) {
    const char *slash = dir_of ? strrchr(dir_of, '/') : NULL;
    if (!slash) return false;
    int n = snprintf(mod_path, sizeof mod_path, "%.*s/%s", (int)(slash - dir_of), dir_of,
                     C3_CUDA_MODULE_FILE);
    return n > 0 && (size_t)n < sizeof mod_path && access(mod_path, R_OK) == 0;
}

/* Where the module is: COSMOS3_CUDA_MODULE, beside this library, beside
 * the program, the folder the library is installed to. */
static bool find_module(void) {
    const char *env = c3_env()->cuda_module;
    if (env) {
        snprintf(mod_path, sizeof mod_path, "%s", env);
        return *env != 0;
    }
    Dl_info di;
    if (dladdr((void *)find_module, &di) && beside(di.dli_fname)) return true;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        if (beside(exe)) return true;
    }
    return beside(COSMOS3_LIBDIR "/" C3_CUDA_MODULE_FILE);
}

static void open_module(void) {
    if (!COSMOS3_HAVE_CUDA) {
        snprintf(why, sizeof why, NO_CUDA_BUILD);
        return;
    }
    if (!find_module()) {
        if (c3_env()->cuda_module)
            snprintf(why, sizeof why, "COSMOS3_CUDA_MODULE is empty: no CUDA module");
        else
            snprintf(why, sizeof why,
                     "the CUDA module %s is not beside libcosmos3 or the program, nor in %s; "
                     "reinstall, or name it in COSMOS3_CUDA_MODULE",
                     C3_CUDA_MODULE_FILE, COSMOS3_LIBDIR);
        return;
    }
    void *h = dlopen(mod_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "cannot open the CUDA module: %.200s", e ? e : mod_path);
        return;
    }
    c3_cuda_module_init_fn init;
    *(void **)&init = dlsym(h, C3_CUDA_MODULE_INIT);
    char reason[160] = "";
    mod = init ? init(&host, reason, sizeof reason) : NULL;
    if (!mod) {
        snprintf(why, sizeof why, "%.100s: %.150s", mod_path,
                 init ? reason : "not a cosmos3 CUDA module (no " C3_CUDA_MODULE_INIT ")");
        dlclose(h);
    }
}

static bool have_module(void) {
    pthread_once(&once, open_module);
    return mod != NULL;
}

int c3_backend_cuda(int device, c3_backend **out) {
    *out = NULL;
    if (!have_module()) return c3_fail(C3_ERESOURCE, "%s", COSMOS3_HAVE_CUDA ? why : NO_CUDA_FIX);
    C3_TRY(mod->backend_new(device, out));
    int rc = c3_backend_check(*out); /* what it says it can do, once */
    if (rc) {
        c3_backend_destroy(*out);
        *out = NULL;
    }
    return rc;
}

int c3_gpu_count(void) {
    return have_module() ? mod->gpu_count() : 0;
}

int c3_gpu_probe(char *w, size_t n) {
    if (have_module()) return mod->gpu_probe(w, n);
    snprintf(w, n, "%s", why);
    return 0;
}

int c3_gpu_info(int dev, char *name, size_t n, int64_t *total, int64_t *free_b) {
    if (have_module()) return mod->gpu_info(dev, name, n, total, free_b);
    snprintf(name, n, "none");
    *total = *free_b = 0;
    return c3_fail(C3_ERESOURCE, "%s", COSMOS3_HAVE_CUDA ? why : NO_CUDA_FIX);
}

int c3_gpu_id(int dev, char *id, size_t n) {
    snprintf(id, n, "?");
    if (!have_module()) return c3_fail(C3_ERESOURCE, "%s", COSMOS3_HAVE_CUDA ? why : NO_CUDA_FIX);
    return mod->gpu_id(dev, id, n);
}

int comm_nccl_create_procs(const c3_plan *p, int lo, int n, c3_backend *const *bes,
                           int (*share_id)(void *buf, size_t n), struct c3_comm_set **out) {
    *out = NULL;
    if (!have_module())
        return c3_fail(C3_ERESOURCE, "NCCL communicator: %s",
                       COSMOS3_HAVE_CUDA ? why : NO_CUDA_FIX);
    return mod->comm_nccl(p, lo, n, bes, share_id, out);
}

int comm_nccl_create(const c3_plan *p, c3_backend *const *bes, struct c3_comm_set **out) {
    return comm_nccl_create_procs(p, 0, p->world, bes, NULL, out);
}

int comm_dev_create(const c3_plan *p, c3_backend *const *bes, struct c3_comm_set **out) {
    *out = NULL;
    if (!have_module())
        return c3_fail(C3_ERESOURCE, "device-memory communicator: %s",
                       COSMOS3_HAVE_CUDA ? why : NO_CUDA_FIX);
    return mod->comm_dev(p, bes, out);
}
