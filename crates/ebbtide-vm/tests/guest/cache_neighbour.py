# Runs in the guest (Debian's python3, glibc, as root): one service and one neighbour in a fresh
# cgroup v2 with the given limits.
#
# The service is Debian's unmodified python3 (under the allocator its environment names):
# it builds a cache of CACHE_MIB MiB of records, drops it, and keeps running. Then the neighbour
# (glibc python3) maps NEIGHBOUR_MIB MiB in 4 MiB steps, STEP_MS apart, and holds it. Meanwhile
# the service's VmRSS is read every 20 ms. Printed as KEY=VALUE lines:
#   BASE_KIB RSS_CACHED_KIB  the service's RSS before the cache and after dropping it
#   BACK_MS   guest time from the neighbour's start until the service's RSS fell by 3/4 of what
#             the dropped cache left (-1: not within WATCH_S)
#   SWAP_KIB  the service's VmSwap at the end; EVENTS_HIGH/MAX/OOM_KILL: memory.events deltas
#   SERVICE_KILLED/NEIGHBOUR_KILLED  1 when that process died by SIGKILL
#   STALL_US  memory.pressure `full total` delta of the cgroup
# Arguments are KEY=VALUE: HIGH, MAX, SWAP_MAX (memory.* values), CACHE_MIB, NEIGHBOUR_MIB,
# STEP_MS, WATCH_S, UID (run the service as this uid), DELEGATE (chown the cgroup to UID the way
# systemd delegates it), NAME (the cgroup), STAT (an `ebbtide` binary: run `ebbtide stat PID`
# once the cache is dropped and print its output between STAT_BEGIN/STAT_END lines).
import os, signal, subprocess, sys, time

a = dict(kv.split('=', 1) for kv in sys.argv[1:] if kv)
name = a.get('NAME', 'svc')
cg = '/sys/fs/cgroup/ebbtide-t-%s-%d' % (name, os.getpid())
uid = int(a['UID']) if a.get('UID') else None

SERVICE = r'''
import gc, sys
n = int(sys.argv[1])
data = None
for line in sys.stdin:
    cmd = line.strip()
    if cmd == 'burst':
        data = {}
        for i in range(n):
            data['key:%010d' % i] = [('v%d' % i) * (1 + (i * 7919) % 97), i * 1.5, (i, -i)]
        print('burst', flush=True)
    elif cmd == 'delete':
        data = None
        gc.collect()
        print('deleted', flush=True)
    else:
        break
'''

NEIGHBOUR = r'''
import mmap, sys, time
mib, step = int(sys.argv[1]), float(sys.argv[2]) / 1000
m = mmap.mmap(-1, mib << 20)
print('start', time.monotonic(), flush=True)
for off in range(0, mib << 20, 4 << 20):
    for p in range(off, min(off + (4 << 20), mib << 20), 4096):
        m[p] = 1
    time.sleep(step)
print('mapped', time.monotonic(), flush=True)
sys.stdin.read()
'''

def wr(path, v):
    with open(path, 'w') as f:
        f.write(str(v))

def events():
    d = {}
    for l in open(cg + '/memory.events'):
        k, v = l.split()
        d[k] = int(v)
    return d

def full_stall():
    for l in open(cg + '/memory.pressure'):
        if l.startswith('full'):
            return int(l.split('total=')[1])
    return 0

def status(pid, key):
    try:
        for l in open('/proc/%d/status' % pid):
            if l.startswith(key + ':'):
                return int(l.split()[1])
    except OSError:
        return -1
    return 0

os.mkdir(cg)
procs = []
try:
    wr(cg + '/memory.high', a.get('HIGH', 'max'))
    wr(cg + '/memory.max', a.get('MAX', 'max'))
    if 'SWAP_MAX' in a:
        wr(cg + '/memory.swap.max', a['SWAP_MAX'])
    if a.get('DELEGATE') == '1':
        # What systemd does for Delegate=yes (and for MemoryPressureWatch= of a user's unit).
        for f in ['', '/cgroup.procs', '/cgroup.threads', '/cgroup.subtree_control',
                  '/memory.pressure', '/memory.reclaim']:
            os.chown(cg + f, uid, uid)

    def enter():
        wr(cg + '/cgroup.procs', os.getpid())
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)

    env = {k: v for k, v in os.environ.items() if not k.startswith('EBBTIDE')}
    env['PYTHONMALLOC'] = 'malloc'
    env['HOME'] = '/tmp'
    service_env = dict(env)
    for kv in a.get('ENV', '').split(';'):
        if kv:
            k, v = kv.split('=', 1)
            service_env[k] = v
    entries = int(a["CACHE_MIB"]) * 1700  # ~600 bytes a record, measured
    svc = subprocess.Popen(a.get('PREFIX', '').split() + ['/usr/bin/python3', '-c', SERVICE, str(entries)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=service_env,
                           preexec_fn=enter, text=True)
    procs.append(svc)
    time.sleep(1.0)
    base = status(svc.pid, 'VmRSS')
    svc.stdin.write('burst\n'); svc.stdin.flush(); assert svc.stdout.readline().startswith('burst')
    svc.stdin.write('delete\n'); svc.stdin.flush(); assert svc.stdout.readline().startswith('deleted')
    time.sleep(1.5)  # past the malloc's sources_delay_ms and its first periodic pass
    cached = status(svc.pid, 'VmRSS')
    print('BASE_KIB=%d' % base)
    print('RSS_CACHED_KIB=%d' % cached)
    if a.get('STAT'):
        st = subprocess.run([a['STAT'], 'stat', str(svc.pid)], capture_output=True, text=True)
        print('STAT_BEGIN'); print(st.stdout + st.stderr); print('STAT_END')
    # The kernel files the service holds open (its pressure sources' descriptors).
    fds = set()
    for fd in os.listdir('/proc/%d/fd' % svc.pid):
        try:
            t = os.readlink('/proc/%d/fd/%s' % (svc.pid, fd))
        except OSError:
            continue
        if t.startswith('/sys/fs/cgroup') or t.startswith('/proc/pressure'):
            fds.add(t.replace(cg, 'CG'))
    print('FILES=%s' % ','.join(sorted(fds)))
    ev0 = events()
    stall0 = full_stall()
    # auto: the neighbour alone stays under memory.high (else memory.max), with the held cache
    # it is over it by EXCESS_PCT (default 100) percent of the cache.
    nmib = a['NEIGHBOUR_MIB']
    if nmib == 'auto':
        h = open(cg + '/memory.high').read().strip()
        high = int(h if h != 'max' else open(cg + '/memory.max').read())
        cur = int(open(cg + '/memory.current').read())
        excess = (cached - base) * 1024 * int(a.get('EXCESS_PCT', '100')) // 100
        nmib = str(max(8, (high - cur + excess) >> 20))
    print('NEIGHBOUR_MIB=%s' % nmib)
    nb = subprocess.Popen(['/usr/bin/python3', '-c', NEIGHBOUR, nmib, a.get('STEP_MS', '20')],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                          preexec_fn=lambda: wr(cg + '/cgroup.procs', os.getpid()), text=True)
    procs.append(nb)
    t0 = float(nb.stdout.readline().split()[1])
    goal = cached - (cached - base) * 3 // 4
    back = -1
    end = t0 + float(a.get('WATCH_S', '10'))
    while time.monotonic() < end:
        r = status(svc.pid, 'VmRSS')
        if back < 0 and 0 <= r <= goal:
            back = int((time.monotonic() - t0) * 1000)
        if svc.poll() is not None or nb.poll() is not None:
            break
        if back >= 0 and time.monotonic() > t0 + 4:
            break
        time.sleep(0.02)
    time.sleep(0.5)
    ev1 = events()
    print('BACK_MS=%d' % back)
    print('RSS_END_KIB=%d' % status(svc.pid, 'VmRSS'))
    print('SWAP_KIB=%d' % status(svc.pid, 'VmSwap'))
    for k in ['high', 'max', 'oom_kill']:
        print('EVENTS_%s=%d' % (k.upper(), ev1.get(k, 0) - ev0.get(k, 0)))
    print('STALL_US=%d' % (full_stall() - stall0))
    print('SERVICE_KILLED=%d' % (1 if svc.poll() == -signal.SIGKILL else 0))
    print('NEIGHBOUR_KILLED=%d' % (1 if nb.poll() == -signal.SIGKILL else 0))
    if a.get('STAT') and svc.poll() is None:
        # The service's own count of events per source (events_psi=..., events_events=...).
        st = subprocess.run([a['STAT'], 'stat', '--json', str(svc.pid)], capture_output=True, text=True)
        import json
        try:
            g = json.loads(st.stdout)['global']
            for k, v in g.items():
                if k.startswith('events_'):
                    print('STAT_%s=%s' % (k.upper(), v))
        except ValueError:
            print('STAT_ERROR=%r' % (st.stdout + st.stderr))
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    for _ in range(50):
        try:
            os.rmdir(cg)
            break
        except OSError:
            time.sleep(0.1)
