# A Python workload for the malloc test (crates/ebbtide-malloc/tests/all/real_programs.rs): run with
# PYTHONMALLOC=malloc, every object below is a malloc/realloc/free of the allocator under test.
# Deterministic: the same lines under every allocator.
import collections, gc, hashlib, json, pickle, random, re, sys, threading, queue, zlib
import _testcapi

sys.set_int_max_str_digits(0)
print("allocator", _testcapi.pymem_getallocatorsname())
random.seed(12)
digest = hashlib.sha256()


def out(name, value):
    s = f"{name} {value}"
    digest.update(s.encode())
    print(s)


# Dicts that grow, shrink and grow again (resize = realloc of the table).
d = {f"key-{i}": [i, str(i) * (i % 7)] for i in range(200_000)}
for i in range(0, 200_000, 2):
    del d[f"key-{i}"]
for i in range(100_000):
    d[("t", i)] = {"n": i, "s": "x" * (i % 50)}
out("dict", (len(d), sum(v[0] for k, v in d.items() if isinstance(k, str))))

# Lists of tuples, sorted several ways.
rows = [(random.randrange(1000), random.random(), f"name{i}") for i in range(150_000)]
rows.sort()
by_name = sorted(rows, key=lambda r: r[2])
out("sort", (rows[0][0], rows[-1][0], by_name[0][2], by_name[-1][2]))

# Strings: building, joining, splitting, replacing, unicode.
text = " ".join(f"wörd{i % 977}-ξ{i % 13}" for i in range(300_000))
parts = text.split(" ")
up = text.upper().replace("WÖRD", "w")
out("str", (len(text), len(parts), len(up), up.count("Ξ1"), hashlib.md5(up.encode()).hexdigest()))
acc = ""
for i in range(20_000):
    acc += chr(0x41 + i % 26) * (i % 5)
out("concat", (len(acc), acc[-20:]))

# JSON round trip of a nested structure.
tree = {"items": [{"id": i, "tags": [f"t{j}" for j in range(i % 8)], "v": i / 7} for i in range(60_000)]}
blob = json.dumps(tree, sort_keys=True)
back = json.loads(blob)
out("json", (len(blob), back == tree, hashlib.sha1(blob.encode()).hexdigest()))

# Regular expressions over a large text.
words = re.findall(r"w\w+?(\d+)-ξ(\d+)", text)
sub = re.sub(r"(\d)(\d)", r"\2\1", text[:200_000])
out("re", (len(words), sum(int(a) for a, _ in words[:5000]), hashlib.md5(sub.encode()).hexdigest()))

# Big integers.
f = 1
for i in range(2, 4000):
    f *= i
out("bigint", (len(str(f)), sum(map(int, str(f))) % 100_003, pow(3, 10**5, 10**40 + 7)))

# collections.
c = collections.Counter(p.split("-")[0] for p in parts)
dq = collections.deque(maxlen=1000)
for i in range(200_000):
    dq.append((i, str(i)))
od = collections.OrderedDict((i, i * i) for i in range(50_000))
for i in range(0, 50_000, 3):
    od.move_to_end(i)
out("collections", (c.most_common(3), dq[0], list(od)[:3]))

# Cyclic garbage for the collector.
class Node:
    def __init__(self, i):
        self.i = i
        self.peer = None
        self.data = [i] * (i % 17)

for round_ in range(5):
    nodes = [Node(i) for i in range(40_000)]
    for a, b in zip(nodes, nodes[1:] + nodes[:1]):
        a.peer = b
    del nodes
    gc.collect()
out("gc", gc.collect())

# bytearray growth (realloc), pickle, zlib.
ba = bytearray()
for i in range(100_000):
    ba += bytes([i % 251]) * (i % 9)
packed = pickle.dumps((d, rows[:20_000]), protocol=5)
z = zlib.compress(packed, 6)
out("bytes", (len(ba), hashlib.sha256(ba).hexdigest(), pickle.loads(zlib.decompress(z))[0] == d))

# Threads: each builds its own data and hands results to the others through a queue, so
# blocks are freed by other threads than those that allocated them.
q = queue.Queue()
results = []

def worker(n):
    local = {}
    for i in range(60_000):
        local[(n, i)] = "v" * (i % 40) + str(i)
    q.put(local)

threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
for t in threads:
    t.start()
for _ in threads:
    got = q.get()
    results.append(sum(len(v) for v in got.values()))
    del got
for t in threads:
    t.join()
out("threads", sorted(results))

print("digest", digest.hexdigest())
