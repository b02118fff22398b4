/* vmsize_kib(): this process's VmSize in KiB (/proc/self/status), -1 if unknown. Shared by the
 * RLIMIT_AS test programs (rlimit_as_lowered.c, fill_limit.h). */
#ifndef EBBTIDE_TEST_VMSIZE_H
#define EBBTIDE_TEST_VMSIZE_H
#include <stdio.h>

static long vmsize_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}
#endif
