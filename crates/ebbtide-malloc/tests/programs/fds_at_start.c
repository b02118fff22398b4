/* What a program finds of its descriptors, started (by the test, through sh) with stdin
 * closed: fd 0 must be closed, the first open() must get the lowest number (0, then 3), and at
 * start no descriptor above 2 may be open that the program did not inherit; a second later
 * (libebbtide_malloc.so opens its pressure sources one second after start by default) fd 0
 * must still be closed and the lowest free number still 0. Reduced from CPython's test_posix
 * (posix_spawn with fd 0 closed: the child found fd 0 open) and test_subprocess (pass_fds: the
 * child found descriptors 3, 4, 5 it was not given). A library that opens files takes the
 * lowest free numbers, so a program's stdin could become that library's file. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *fd0(void) {
    struct stat st;
    return fstat(0, &st) == 0 ? "open" : "closed";
}

int main(void) {
    printf("fd 0 at start: %s\n", fd0());
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
    close(a);
    close(b);
    usleep(1300 * 1000);
    printf("fd 0 after 1.3 s: %s\n", fd0());
    a = open("/dev/null", O_RDONLY);
    printf("first open() after 1.3 s gets %d\n", a);
    return 0;
}
