/* wav.h - a clip's sound as a WAV file in memory (RIFF/WAVE, interleaved
 * PCM: 16-bit integers or 32-bit IEEE floats), and the one-line level meter
 * the REPL and the TUI print for a finished clip's sound. */
#ifndef COSMOS3_WAV_H
#define COSMOS3_WAV_H

#include "util.h"

/* pcm: planar floats [channels, samples] in [-1, 1] (s16 rounds and clamps).
 * *out is xmalloc'd, *n bytes. COSMOS3_EUSAGE for an empty or too long sound. */
int wav_encode(const float *pcm, int channels, int64_t samples, int rate, bool f32, uint8_t **out,
               size_t *n);

/* "sound 48 kHz stereo 0.40 s  L -12.3 dBFS peak -1.2  R ..." into buf: the
 * RMS and peak level per channel in dB relative to full scale, with a bar. */
void wav_level_line(const float *pcm, int channels, int64_t samples, int rate, char *buf, size_t n);

#endif
