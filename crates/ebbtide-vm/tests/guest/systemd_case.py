# Runs in the systemd guest (trixie's python3, as root). Issue 38's systemd case: python3 under
# `ebbtide run` as a transient service with MemoryHigh= and MemoryPressureWatch=on, only the
# systemd source enabled, builds and drops a cache; a neighbour in the service's cgroup pushes it
# over memory.high. This script holds a PSI trigger of its own on the same file with the same
# bytes systemd hands the service, counting the kernel's notifications. KEY=VALUE output:
#   CACHED_BYTES (the service's, after the drop), BACK_MS (guest time from the neighbour's start
#   until the service's RSS fell by 3/4 of them; -1 not within 8 s), NOTIFY (the kernel's
#   notifications on our trigger meanwhile), EVENTS_SYSTEMD (the service's systemd-source
#   events), WATCH, WRITE (the service's $MEMORY_PRESSURE_WATCH and _WRITE).
# Argument: the ebbtide CLI's path (under /host).
import base64, json, os, select, subprocess, sys, threading, time

cli = sys.argv[1]
unit = 'ebbtide-cache'
SERVICE = r'''
import gc, time
data = {}
for i in range(68000):
    data['key:%010d' % i] = [('v%d' % i) * (1 + (i * 7919) % 97), i * 1.5, (i, -i)]
data = None
gc.collect()
open('/run/ebbtide-cache-ready', 'w').close()
time.sleep(600)
'''
NEIGHBOUR = r'''
import sys, time
mib = int(sys.argv[1])
m = bytearray(mib << 20)  # python3-minimal has no mmap module; calloc'd, touched below
for off in range(0, mib << 20, 4 << 20):
    for p in range(off, min(off + (4 << 20), mib << 20), 4096):
        m[p] = 1
    time.sleep(0.02)
sys.stdin.read()
'''

def rss(pid):
    for l in open('/proc/%d/status' % pid):
        if l.startswith('VmRSS:'):
            return int(l.split()[1]) * 1024
    return -1

def stat(pid):
    out = subprocess.run([cli, 'stat', '--json', str(pid)], capture_output=True, text=True)
    return json.loads(out.stdout)['global']

subprocess.run(['systemctl', 'start', 'dbus.socket'], check=True)
try:
    os.unlink('/run/ebbtide-cache-ready')
except OSError:
    pass
subprocess.run(['systemd-run', '--unit=' + unit, '-p', 'MemoryHigh=96M', '-p', 'MemoryPressureWatch=on',
                '-E', 'PYTHONMALLOC=malloc', '-E', 'HOME=/tmp',
                '-E', 'EBBTIDE_CONF=sources=systemd,control_socket=1,trim_interval_ms=60min,pool_shrink_interval_ms=60s',
                cli, 'run', '--', '/usr/bin/python3', '-c', SERVICE], check=True)
nb = None
try:
    end = time.monotonic() + 150
    while not os.path.exists('/run/ebbtide-cache-ready'):
        assert time.monotonic() < end, 'the service never dropped its cache'
        time.sleep(0.1)
    time.sleep(1.5)
    pid = int(subprocess.run(['systemctl', 'show', '-P', 'MainPID', unit], capture_output=True, text=True).stdout)
    env = dict(kv.split('=', 1) for kv in open('/proc/%d/environ' % pid).read().split('\0') if '=' in kv)
    watch, write = env['MEMORY_PRESSURE_WATCH'], base64.b64decode(env['MEMORY_PRESSURE_WRITE'])
    print('WATCH=%s' % watch)
    print('WRITE=%r' % write)
    cg = os.path.dirname(watch)
    cached = stat(pid)['cached_bytes']
    before = stat(pid)['events_systemd']
    print('CACHED_BYTES=%d' % cached)
    # Our own trigger, as systemd's protocol arms it.
    fd = os.open(watch, os.O_RDWR | os.O_NONBLOCK)
    os.write(fd, write)
    count = [0]
    stop = threading.Event()
    def counter():
        p = select.poll()
        p.register(fd, select.POLLPRI)
        while not stop.is_set():
            for _, ev in p.poll(100):
                if ev & select.POLLPRI:
                    count[0] += 1
    th = threading.Thread(target=counter)
    th.start()
    r0 = rss(pid)
    high = int(open(cg + '/memory.high').read())
    cur = int(open(cg + '/memory.current').read())
    mib = max(8, (high - cur + cached) >> 20)
    nb = subprocess.Popen(['/usr/bin/python3', '-c', NEIGHBOUR, str(mib)], stdin=subprocess.PIPE,
                          preexec_fn=lambda: open(cg + '/cgroup.procs', 'w').write(str(os.getpid())))
    t0 = time.monotonic()
    back = -1
    while time.monotonic() < t0 + 8 and nb.poll() is None:
        if back < 0 and rss(pid) <= r0 - cached * 3 // 4:
            back = int((time.monotonic() - t0) * 1000)
        if back >= 0 and time.monotonic() > t0 + 4:
            break
        time.sleep(0.02)
    stop.set()
    th.join()
    after = stat(pid)['events_systemd']
    print('NEIGHBOUR_MIB=%d' % mib)
    print('NEIGHBOUR_EXIT=%s' % nb.poll())
    print('BACK_MS=%d' % back)
    print('NOTIFY=%d' % count[0])
    print('EVENTS_SYSTEMD=%d' % (after - before))
finally:
    if nb is not None:
        nb.kill()
        nb.wait()
    subprocess.run(['systemctl', 'stop', unit])
