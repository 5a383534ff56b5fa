/* wav.c - WAV files and the level meter line (wav.h). */
#include "wav.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* RIFF chunk sizes are 32-bit: the data must stay below 4 GiB. */
#define WAV_MAX_DATA 0xFFFFFF00u
enum { WAV_PCM = 1, WAV_FLOAT = 3 };

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int wav_encode(const float *pcm, int channels, int64_t samples, int rate, bool f32, uint8_t **out,
               size_t *n) {
    *out = NULL;
    *n = 0;
    int bps = f32 ? 4 : 2;
    if (channels < 1 || channels > 8 || samples < 1 || rate < 1)
        return c3_fail(COSMOS3_EUSAGE,
                       "WAV: %d channels of %lld samples at %d Hz cannot be written", channels,
                       (long long)samples, rate);
    uint64_t data = (uint64_t)samples * (uint64_t)channels * (uint64_t)bps;
    if (data > WAV_MAX_DATA)
        return c3_fail(COSMOS3_EUSAGE, "WAV: %llu bytes of sound exceed the format's 4 GiB",
                       (unsigned long long)data);
    /* RIFF, fmt (18 bytes: cbSize 0), fact (float only), data */
    size_t head = 12 + 8 + 18 + (f32 ? 12 : 0) + 8;
    uint8_t *b = xmalloc(head + (size_t)data);
    memcpy(b, "RIFF", 4);
    put32(b + 4, (uint32_t)(head - 8 + data));
    memcpy(b + 8, "WAVEfmt ", 8);
    put32(b + 16, 18);
    put16(b + 20, f32 ? WAV_FLOAT : WAV_PCM);
    put16(b + 22, (uint16_t)channels);
    put32(b + 24, (uint32_t)rate);
    put32(b + 28, (uint32_t)(rate * channels * bps));
    put16(b + 32, (uint16_t)(channels * bps));
    put16(b + 34, (uint16_t)(8 * bps));
    put16(b + 36, 0);
    size_t o = 38;
    if (f32) {
        memcpy(b + o, "fact", 4);
        put32(b + o + 4, 4);
        put32(b + o + 8, (uint32_t)samples);
        o += 12;
    }
    memcpy(b + o, "data", 4);
    put32(b + o + 4, (uint32_t)data);
    o += 8;
    for (int64_t t = 0; t < samples; t++)
        for (int c = 0; c < channels; c++) {
            float v = pcm[(int64_t)c * samples + t];
            if (f32) {
                uint32_t u;
                memcpy(&u, &v, 4);
                put32(b + o, u);
                o += 4;
            } else {
                float x = isfinite(v) ? v : 0.0f;
                x = x < -1.0f ? -1.0f : x > 1.0f ? 1.0f : x;
                put16(b + o, (uint16_t)(int16_t)lrintf(x * 32767.0f));
                o += 2;
            }
        }
    *out = b;
    *n = o;
    return COSMOS3_OK;
}

void wav_level_line(const float *pcm, int channels, int64_t samples, int rate, char *buf,
                    size_t n) {
    size_t o = (size_t)snprintf(buf, n, "sound %g kHz %s %.2f s", rate / 1000.0,
                                channels == 1   ? "mono"
                                : channels == 2 ? "stereo"
                                                : "multichannel",
                                samples / (double)(rate > 0 ? rate : 1));
    static const char *names[] = {"L", "R"};
    for (int c = 0; c < channels && o < n; c++) {
        double ss = 0, pk = 0;
        for (int64_t t = 0; t < samples; t++) {
            double v = pcm[(int64_t)c * samples + t];
            ss += v * v;
            pk = fabs(v) > pk ? fabs(v) : pk;
        }
        double rms = samples ? sqrt(ss / (double)samples) : 0;
        double db = rms > 1e-10 ? 20 * log10(rms) : -200, pdb = pk > 1e-10 ? 20 * log10(pk) : -200;
        /* a 10-cell bar over -60..0 dBFS */
        char bar[11];
        int cells = (int)lround((db + 60) / 6);
        cells = cells < 0 ? 0 : cells > 10 ? 10 : cells;
        for (int i = 0; i < 10; i++)
            bar[i] = i < cells ? '#' : '.';
        bar[10] = 0;
        char ch[8];
        snprintf(ch, sizeof ch, "%s", channels <= 2 ? names[c] : "ch");
        o += (size_t)snprintf(buf + o, n - o, "  %s [%s] %.1f dBFS (peak %.1f)", ch, bar, db, pdb);
    }
}
