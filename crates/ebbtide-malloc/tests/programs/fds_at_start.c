/* What a program finds of its descriptors at main(), started (by the test, through sh) with
 * stdin closed: fd 0 must be closed, the first open() must get the lowest number (0, then 3),
 * and no descriptor above 2 may be open that the program did not open. Reduced from CPython's
 * test_posix (posix_spawn with fd 0 closed: the child found fd 0 open) and test_subprocess
 * (pass_fds: the child found descriptors 3, 4, 5 it was not given). A library that opens files
 * at load takes the lowest free numbers, so a program's stdin could be that library's file. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void) {
    struct stat st;
    printf("fd 0 at start: %s\n", fstat(0, &st) == 0 ? "open" : "closed");
    int others = 0;
    DIR *d = opendir("/proc/self/fd");
    int dfd = d ? dirfd(d) : -1;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] != '.' && fd > 2 && fd != dfd) others++;
    }
    if (d) closedir(d);
    printf("descriptors above 2 at start: %d\n", others);
    int a = open("/dev/null", O_RDONLY);
    int b = open("/dev/null", O_RDONLY);
    printf("first open() gets %d, the next %d\n", a, b);
    return 0;
}
