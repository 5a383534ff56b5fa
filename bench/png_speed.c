/* png_speed.c - the PNG write at 1360x768 (Super T2I's size), as cosmos3
 * writes it (app/png_io.c): png_encode_mem and png_write (temporary file,
 * fsync, rename) on noise (what random weights decode to), a smooth and a
 * flat picture; the best of REPS wall times and the bytes. Build and run
 * (after meson compile -C build):
 *   cc -O2 -fopenmp -Iapp -Iinclude -Ibase -Isrc -Ibuild bench/png_speed.c build/libcosmos3app.a \
 *      build/libcosmos3base.a -Lbuild -lcosmos3 -lpng -lz -ljansson -lm -o build/png_speed
 *   LD_LIBRARY_PATH=build OMP_NUM_THREADS=N build/png_speed [DIR]   (DIR: where png_write writes;
 * /tmp) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "png_io.h"

#define W 1360
#define H 768
#define REPS 9

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    size_t n = (size_t)W * H * 3;
    uint8_t *pic[3];
    const char *names[3] = {"noise", "smooth", "flat"};
    uint32_t s = 12345;
    for (int k = 0; k < 3; k++)
        pic[k] = malloc(n);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                size_t i = ((size_t)y * W + x) * 3 + c;
                s = s * 1664525u + 1013904223u;
                pic[0][i] = (uint8_t)(s >> 24);
                double v = 128 + 60 * sin(x * 0.01 + c) * cos(y * 0.013) +
                           40 * sin((x + y) * 0.003 * (c + 1)) + (double)((s >> 16) & 3) - 1.5;
                pic[1][i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                int in = (x - 680) * (x - 680) + (y - 384) * (y - 384) < 200 * 200;
                pic[2][i] = (uint8_t)(in ? 200 - 60 * c : 30 + 10 * c);
            }
    char path[4096];
    snprintf(path, sizeof path, "%s/png_speed.%d.png", dir, (int)getpid());
    c3_png_text txt = {.key = "parameters", .text = "png_speed"};
    printf("%dx%d, best of %d\n", W, H, REPS);
    for (int k = 0; k < 3; k++) {
        double bm = 1e9, bf = 1e9;
        size_t bytes = 0;
        for (int r = 0; r < REPS; r++) {
            uint8_t *out = NULL;
            double t0 = now();
            if (png_encode_mem(pic[k], W, H, &txt, 1, &out, &bytes) != 0) return 1;
            double t1 = now();
            free(out);
            if (png_write(path, pic[k], W, H, &txt, 1, true) != 0) return 1;
            double t2 = now();
            bm = fmin(bm, t1 - t0), bf = fmin(bf, t2 - t1);
        }
        printf("  %-6s encode (memory) %7.2f ms | png_write (file, fsync) %7.2f ms | %8zu bytes\n",
               names[k], bm * 1e3, bf * 1e3, bytes);
    }
    unlink(path);
    return 0;
}
