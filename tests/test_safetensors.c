/* test_safetensors.c - reader validation and writer round trip. */
#include "test_util.h"

int main(void) {
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[2] = {c3_f32_to_bf16(1.5f), c3_f32_to_bf16(-2.0f)};
    st_wtensor ts[2] = {
        {.name = "a", .dtype = C3_F32, .ndim = 2, .shape = {2, 3}, .data = a},
        {.name = "b", .dtype = C3_BF16, .ndim = 1, .shape = {2}, .data = b},
    };
    const char *meta[] = {"format", "pt"};
    char path[] = "/tmp/c3_test_st_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    T_CHECK(st_write(path, ts, 2, meta, 1, true) == C3_OK, "%s", c3_errmsg());
    st_file f;
    T_CHECK(st_open(&f, path) == C3_OK, "%s", c3_errmsg());
    const st_tensor *ta = st_find(&f, "a"), *tb = st_find(&f, "b");
    T_CHECK(ta && ta->ndim == 2 && ta->shape[1] == 3, "shape of a");
    T_CHECK(tb && tb->dtype == C3_BF16, "dtype of b");
    if (ta && tb) {
        float *fa = st_to_f32(ta), *fb = st_to_f32(tb);
        T_CHECK(fa[5] == 6.0f, "a[5] = %g", fa[5]);
        T_CHECK(fb[0] == 1.5f && fb[1] == -2.0f, "b = %g %g", fb[0], fb[1]);
        free(fa);
        free(fb);
    }
    T_CHECK(st_meta(&f, "format") && strcmp(st_meta(&f, "format"), "pt") == 0, "metadata");
    st_close(&f);
    T_CHECK(st_write(path, ts, 2, NULL, 0, false) == C3_EOUTPUT, "refuses to overwrite");
    unlink(path);
    return t_done("safetensors");
}
