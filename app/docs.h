/* docs.h - documentation generated from the options table: the man page's
 * OPTIONS section and the bash completion script; and its ENVIRONMENT
 * section from the table of environment settings (src/env.c). Tests compare the
 * committed man/cosmos3.1 and share/cosmos3.bash-completion with these. */
#ifndef COSMOS3_DOCS_H
#define COSMOS3_DOCS_H

#include <stdio.h>

void docs_man_options(FILE *f);
void docs_man_environment(FILE *f);
void docs_bash_completion(FILE *f, const char *const *commands, int ncommands);

#endif
