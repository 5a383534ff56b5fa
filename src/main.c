/* main.c - entry point placeholder (replaced by cli). */
#include <stdio.h>
#include "common.h"
int main(int argc, char **argv) {
    (void)argc; (void)argv;
    printf("cosmos3 %s\n", COSMOS3_VERSION);
    return 0;
}
