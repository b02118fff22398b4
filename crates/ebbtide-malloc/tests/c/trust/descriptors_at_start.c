/* The program's lowest free descriptor stays its own while the malloc's runtime starts and
 * while its pressure sources open (a second after the start, `sources_delay_ms`).
 *
 * The program allocates 64 blocks of 1 MiB, past `runtime_start_bytes` (16 MiB), so one of
 * those calls starts the runtime's threads, and after each one, for 2 ms, and for 1.5 s after
 * the last, it takes and closes a descriptor with dup(1) over and over: every one must be the
 * number that was free at the start (glibc's malloc opens nothing). Meanwhile, every 200 dups,
 * it allocates and frees a block of 1 MiB, as a working program allocates. A runtime thread
 * opening its files while the program runs on would take that number for a moment and hand the
 * program the next one (CPython's test_os.test_fd_leak failed so).
 *
 * Prints `tasks N` (the threads the process has at the end) and `ok`, or the first wrong
 * descriptor and exits 1. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int expect;

static int dup_for(double ms, int after) {
  double end = now_ms() + ms;
  for (long n = 0; now_ms() < end; n++) {
    if (n % 200 == 199) {
      char *p = malloc(1 << 20);
      if (!p) {
        puts("malloc failed");
        return 1;
      }
      p[0] = 1;
      free(p);
    }
    int fd = dup(1);
    if (fd != expect) {
      printf("descriptor %d where %d was free (after block %d)\n", fd, expect, after);
      return 1;
    }
    close(fd);
  }
  return 0;
}

int main(void) {
  expect = dup(1);
  close(expect);
  static char *blocks[64];
  for (int i = 0; i < 64; i++) {
    blocks[i] = malloc(1 << 20);
    if (!blocks[i]) {
      puts("malloc failed");
      return 2;
    }
    memset(blocks[i], i, 4096);
    if (dup_for(2, i)) return 1;
  }
  if (dup_for(1500, 64)) return 1;
  int tasks = 0;
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d));)
    tasks += e->d_name[0] != '.';
  if (d) closedir(d);
  for (int i = 0; i < 64; i++) free(blocks[i]);
  printf("tasks %d\nok\n", tasks);
  return 0;
}
