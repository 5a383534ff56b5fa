/* repl_internal.h - what the REPL's files (repl.c, repl_commands.c,
 * repl_term.c) share beyond repl.h. */
#ifndef COSMOS3_REPL_INTERNAL_H
#define COSMOS3_REPL_INTERNAL_H

#include <stdio.h>

#include "repl.h"

/* Run fn(f, arg) into the sink: stdout as is, or line by line to the sink. */
void repl_print_stream(c3_repl *r, void (*fn)(FILE *, const void *), const void *arg);
/* Start the worker on a load (the settings in r->job_s) or a run. */
int repl_start_job(c3_repl *r, bool load);

#endif
