/* precheck.h - what gen, the REPL, the TUI and serve can check before the
 * model loads (or before a request is queued): the prompt, every input file
 * (--image, --video, --first-last, --noise) and --save-latents' folder. The
 * output's format and destination are output_plan's (output.h); both run
 * before any weight is read, so a typo costs no load and no denoise.
 */
#ifndef COSMOS3_PRECHECK_H
#define COSMOS3_PRECHECK_H

#include "options.h"

/* A prompt with no words (empty, or only spaces): COSMOS3_EUSAGE. NULL is
 * not checked (the REPL and serve take the prompt later). */
int precheck_prompt(const char *prompt);

/* The input files s names exist, are readable and are pictures or clips
 * (the noise: a regular readable file). COSMOS3_EINPUT naming the option
 * that gave the file (or --from FILE, whose settings named it). */
int precheck_inputs(const c3_settings *s);

/* Both of the above. */
int precheck_all(const c3_settings *s);

/* The REPL's and the TUI's start: precheck_all and, when -o was given, the
 * destination as output_plan checks it. */
int precheck_session(const c3_settings *s);

#endif
