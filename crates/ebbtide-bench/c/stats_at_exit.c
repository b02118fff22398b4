/*
 * stats_at_exit.c — ebbtide's statistics of a benchmark run, read by the process itself as it
 * exits. Part of ebbtide-bench-malloc (crates/ebbtide-bench): the sweep preloads it after
 * libebbtide_malloc.so in ebbtide's runs, with the malloc's control socket on
 * (EBBTIDE_CONF=control_socket=1) and MALLOCBENCH_STATS=FILE:
 *
 *   LD_PRELOAD=libebbtide_malloc.so:stats_at_exit.so EBBTIDE_CONF=control_socket=1 \
 *     MALLOCBENCH_STATS=FILE PROGRAM
 *
 * When the program exits (main returns or exit() is called), this asks the process's own
 * control socket for `stats json` (the request `ebbtide stat PID --json` sends,
 * docs/control-protocol.md) and writes the reply's payload to FILE: the counters from the
 * process's start to its end, its own threads joined, its control thread still serving. On a
 * failure FILE receives one line `error: WHAT` instead. Nothing is printed: the program's output
 * stays its own. (Not an EBBTIDE_ name: the malloc takes an unknown one for a typo and ignores
 * its whole environment then.)
 *
 * Why here and not in the program: the counters live in the process and die with it; the
 * socket is the malloc's own way out, and an exit handler is the one point every program
 * passes at its end. Why it wraps main (through __libc_start_main): exit handlers run in reverse
 * order of registration, and both the malloc's own one (it removes the socket's path) and the
 * libraries' destructors (registered by __libc_start_main itself) must run after this one: it is
 * registered at main's start, after a first malloc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

static void fail(const char *out, const char *what) {
    FILE *f = fopen(out, "w");
    if (f) {
        fprintf(f, "error: %s\n", what);
        fclose(f);
    }
}

/* Connects to this process's socket: $XDG_RUNTIME_DIR/ebbtide/PID.sock, else
 * /tmp/ebbtide-EUID/PID.sock (the server's candidate directories, in its order). */
static int connect_own(char *path, size_t cap) {
    const char *x = getenv("XDG_RUNTIME_DIR");
    char dirs[2][256];
    int n = 0;
    if (x && x[0] == '/')
        snprintf(dirs[n++], sizeof dirs[0], "%s/ebbtide", x);
    snprintf(dirs[n++], sizeof dirs[0], "/tmp/ebbtide-%u", (unsigned)geteuid());
    for (int i = 0; i < n; i++) {
        struct sockaddr_un a;
        memset(&a, 0, sizeof a);
        a.sun_family = AF_UNIX;
        int len = snprintf(a.sun_path, sizeof a.sun_path, "%s/%d.sock", dirs[i], (int)getpid());
        if (len < 0 || (size_t)len >= sizeof a.sun_path)
            continue;
        snprintf(path, cap, "%s", a.sun_path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        close(fd);
    }
    return -1;
}

/* The process whose main this is: a forked child inherits the handler, not the socket. */
static pid_t main_pid;

static void dump(void) {
    const char *out = getenv("MALLOCBENCH_STATS");
    if (!out || !out[0] || getpid() != main_pid)
        return;
    char path[256] = "(no socket path)", msg[512];
    int fd = connect_own(path, sizeof path);
    if (fd < 0) {
        snprintf(msg, sizeof msg, "cannot connect to %s: %s (control_socket=1 not set?)", path,
                 strerror(errno));
        fail(out, msg);
        return;
    }
    /* The server answers within its own deadlines; these bound a stuck one. */
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    static const char req[] = "stats json\n";
    if (write(fd, req, sizeof req - 1) != (ssize_t)(sizeof req - 1)) {
        snprintf(msg, sizeof msg, "cannot send the request to %s: %s", path, strerror(errno));
        fail(out, msg);
        close(fd);
        return;
    }
    /* The reply: "ok LEN\n" and LEN bytes, or "err MESSAGE\n". Read whole: the header's line
     * ends within the first read or a few more. */
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b)
                break;
            buf = b;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        char *nl = memchr(buf, '\n', len);
        unsigned long want;
        if (nl && (strncmp(buf, "ok ", 3) != 0 ||
                   (sscanf(buf, "ok %lu", &want) == 1 && len >= (size_t)(nl + 1 - buf) + want)))
            break;
    }
    close(fd);
    char *nl = buf ? memchr(buf, '\n', len) : NULL;
    unsigned long want = 0;
    if (!buf) {
        fail(out, "out of memory reading the reply");
        return;
    }
    if (!nl || sscanf(buf, "ok %lu", &want) != 1 || len < (size_t)(nl + 1 - buf) + want) {
        snprintf(msg, sizeof msg, "bad reply from %s: %.*s", path,
                 (int)(nl ? nl - buf : (len < 200 ? (int)len : 200)), buf);
        fail(out, msg);
        free(buf);
        return;
    }
    FILE *f = fopen(out, "w");
    if (f) {
        fwrite(nl + 1, 1, want, f);
        fclose(f);
    }
    free(buf);
}

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void),
                        void *);

static main_fn real_main;

/* The program's main, with the handler registered first. */
static int main_then_dump(int argc, char **argv, char **envp) {
    /* The malloc sets itself up (and registers its exit handler) at its first call, which may
     * not have come yet: one call first, so that this handler is registered after it. */
    free(malloc(1));
    main_pid = getpid();
    atexit(dump);
    return real_main(argc, argv, envp);
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void),
                      void (*fini)(void), void (*rtld_fini)(void), void *stack_end) {
    start_fn real;
    /* POSIX's way from dlsym's object pointer to a function pointer. */
    *(void **)&real = dlsym(RTLD_NEXT, "__libc_start_main");
    if (!real) {
        fprintf(stderr, "stats_at_exit: no __libc_start_main after this library\n");
        _exit(127);
    }
    real_main = main;
    return real(main_then_dump, argc, argv, init, fini, rtld_fini, stack_end);
}
