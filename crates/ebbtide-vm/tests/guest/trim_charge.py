# Runs in the guest (Debian's python3 and kernel, cgroup v2, as root): Debian's unmodified
# python3 with the allocator LD_PRELOAD names (argv[1]) and PYTHONMALLOC=malloc, in a memory
# cgroup of its own, builds a million 40-byte objects (a dense size class: huge pages), frees
# them and calls malloc_trim(0). Printed as KEY=VALUE lines, MiB:
#   START FULL TRIMMED  the cgroup's memory.current before, with the objects, after the trim
#   HUGE                the process's AnonHugePages with the objects
#   RSS                 its VmRSS after the trim
#   KERNEL              the guest's kernel release
import os, subprocess, sys

lib = sys.argv[1]
root = '/sys/fs/cgroup'
cg = '%s/ebbtide-trim-charge-%d' % (root, os.getpid())
with open(root + '/cgroup.subtree_control') as f:
    if 'memory' not in f.read().split():
        with open(root + '/cgroup.subtree_control', 'w') as w:
            w.write('+memory')
os.mkdir(cg)

CHILD = r'''
import ctypes, sys, time
usage = lambda: int(open(sys.argv[1]).read()) >> 20
def status(key, path):
    for l in open(path):
        if l.startswith(key):
            return int(l.split()[1]) >> 10
time.sleep(0.2)
start = usage()
xs = [bytes(40) for _ in range(1_000_000)]
time.sleep(0.5)
full = usage()
huge = status('AnonHugePages:', '/proc/self/smaps_rollup')
del xs
ctypes.CDLL(None).malloc_trim(0)
print('START=%d\nFULL=%d\nTRIMMED=%d\nHUGE=%d\nRSS=%d' % (start, full, usage(), huge,
      status('VmRSS:', '/proc/self/status')))
'''


def enter():
    with open(cg + '/cgroup.procs', 'w') as f:
        f.write(str(os.getpid()))


try:
    env = dict(os.environ, PYTHONMALLOC='malloc', LD_PRELOAD=lib)
    out = subprocess.run(['/usr/bin/python3', '-S', '-c', CHILD, cg + '/memory.current'],
                         env=env, preexec_fn=enter, capture_output=True, text=True)
    sys.stdout.write(out.stdout)
    print('KERNEL=%s' % os.uname().release)
    sys.stderr.write(out.stderr)
    if out.returncode != 0:
        sys.exit('python3 exited with %d' % out.returncode)
finally:
    os.rmdir(cg)
