"""Python workload of ebbtide-bench-malloc: object, dict, list and string churn.

Run as `python3 -S workload.py SCALE`. Deterministic: it prints the same checksum under every
allocator (the driver compares the output with glibc's). With PYTHONMALLOC=malloc every
object is a malloc/free; with the default (pymalloc) only objects above 512 bytes and the
arenas are.
"""
import json
import sys
import zlib


class Node:
    __slots__ = ("key", "value", "children")

    def __init__(self, key, value):
        self.key = key
        self.value = value
        self.children = []


def tree(n):
    """Build and drop a tree of small objects (allocation-heavy, short-lived)."""
    root = Node(0, "root")
    nodes = [root]
    for i in range(1, n):
        node = Node(i, "v%d" % i)
        nodes[(i * 7919) % len(nodes)].children.append(node)
        nodes.append(node)
    total = 0
    stack = [root]
    while stack:
        node = stack.pop()
        total += node.key + len(node.children)
        stack.extend(node.children)
    return total


def dicts(n):
    """A dict of n entries with string keys and tuple values, half deleted, refilled."""
    d = {}
    for i in range(n):
        d["key-%d" % i] = (i, str(i * 3), [i] * (i % 5))
    for i in range(0, n, 2):
        del d["key-%d" % i]
    for i in range(n // 2):
        d["new-%d" % i] = {"a": i, "b": "x" * (i % 200)}
    return len(d) + sum(len(k) for k in d)


def strings(n):
    """String building and splitting: buffers of every size up to tens of KiB."""
    parts = []
    acc = 0
    for i in range(n):
        s = ("%d," % i) * (1 + i % 300)
        parts.append(s)
        if len(parts) > 64:
            joined = "".join(parts)
            acc += len(joined.split(","))
            parts = []
    return acc


def jsons(n):
    """json round trips of nested documents."""
    doc = {"items": [{"id": i, "name": "item%d" % i, "tags": ["t%d" % (i % 7)] * 3}
                     for i in range(200)]}
    acc = 0
    for _ in range(n):
        text = json.dumps(doc)
        back = json.loads(text)
        acc += len(text) + len(back["items"])
    return acc


def main():
    scale = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    k = lambda n: max(1, int(n * scale))
    results = [tree(k(150000)), dicts(k(120000)), strings(k(60000)), jsons(k(150))]
    text = " ".join(str(r) for r in results)
    print("workload", text, "crc32=%08x" % zlib.crc32(text.encode()))


main()
