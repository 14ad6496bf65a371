#!/usr/bin/env python3
"""Real work for CPython under a preloaded malloc.

Run with PYTHONMALLOC=malloc so that every object goes through malloc/free
instead of pymalloc's arenas.  Prints only figures that do not depend on the
allocator, addresses or timing, so two runs (glibc, sefer) must print the same
bytes.  Usage: work.py [SCALE]   (SCALE=1 takes 1.5-2.5 s under glibc; fractions work)
"""
import collections
import hashlib
import json
import os
import queue
import random
import subprocess
import sys
import threading

SCALE = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0


def n(base):
    """base scaled by SCALE, at least 1."""
    return max(1, int(base * SCALE))


def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def dicts(rng):
    count = n(60000)
    d = {}
    for i in range(count):
        d["key%d" % i] = (i, str(i * i), [i] * (i % 5))
    for i in range(0, count, 2):
        del d["key%d" % i]
    for i in range(0, count, 4):
        d["new%d" % i] = {"v": i, "s": "x" * (i % 37)}
    total = 0
    for v in d.values():
        total += v[0] if isinstance(v, tuple) else v["v"]
    counter = collections.Counter(rng.choice("abcdefgh") for _ in range(n(20000)))
    print("dicts", len(d), total, sorted(counter.items()))
    # Grow and shrink a dict of dicts many times: lots of resizes.
    nested = collections.defaultdict(dict)
    for i in range(n(40000)):
        nested[i % 997][i] = str(i)
        if i % 3 == 0:
            nested[(i * 7) % 997].pop(i - 3, None)
    print("nested", len(nested), sum(len(x) for x in nested.values()))


def lists_and_sorting(rng):
    xs = [rng.random() for _ in range(n(150000))]
    ys = sorted(xs)
    print("sort-floats", digest(ys[::997]))
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 12)))
             for _ in range(n(40000))]
    words.sort(key=lambda w: (len(w), w))
    print("sort-words", len(words), words[0], words[-1], digest(words[::503]))
    # Big list growth by append, slicing copies, list of lists.
    big = []
    for i in range(n(200000)):
        big.append((i, i & 255))
    chunks = [big[i:i + 1000] for i in range(0, len(big), 1000)]
    chunks.sort(key=lambda c: -c[-1][1])
    print("lists", len(big), len(chunks), chunks[0][-1], digest([c[0] for c in chunks[:50]]))
    del big, chunks


def json_round_trip():
    doc = {
        "items": [
            {
                "id": i,
                "name": "item-%d" % i,
                "tags": ["t%d" % j for j in range(i % 7)],
                "price": i * 0.25,
                "nested": {"a": [i, i + 1, str(i)], "b": None, "c": i % 2 == 0},
            }
            for i in range(n(25000))
        ],
        "meta": {"count": n(25000), "unicode": "\u00e9\u4e2d\u6587"},
    }
    text = json.dumps(doc, sort_keys=True)
    back = json.loads(text)
    if back != doc:
        print("json MISMATCH")
    text2 = json.dumps(back, sort_keys=True, indent=1)
    print("json", len(text), len(text2), hashlib.sha256(text.encode()).hexdigest()[:16])


def threads():
    # Producers allocate, consumers free: most frees are cross-thread.
    q = queue.Queue(maxsize=512)
    sums = [0, 0]
    n_per_producer = n(15000)

    def producer(k):
        for i in range(n_per_producer):
            q.put([k, i, "p" * (i % 200), {"i": i}])
        q.put(None)

    def consumer(slot):
        total = 0
        while True:
            item = q.get()
            if item is None:
                break
            total += item[1] + len(item[2]) + item[3]["i"]
        sums[slot] = total

    # Each worker also builds and drops private structures.
    results = [None] * 4

    def worker(k):
        local = {}
        for i in range(n(20000)):
            local[(k, i)] = [str(i)] * (i % 4)
            if i % 2:
                del local[(k, i - 1)]
        results[k] = (len(local), sum(len(v) for v in local.values()))

    ts = [threading.Thread(target=producer, args=(k,)) for k in range(2)]
    ts += [threading.Thread(target=consumer, args=(k,)) for k in range(2)]
    ts += [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("threads", sum(sums), results)


def child_processes():
    payload = "".join("abc%d\n" % i for i in range(n(20000)))
    code = ("import sys, json\n"
            "data = sys.stdin.read().split()\n"
            "print(json.dumps({'n': len(data), 'a': sum(w.count('a') for w in data)}))\n")
    res = subprocess.run([sys.executable, "-c", code], input=payload,
                         capture_output=True, text=True, check=False)
    print("subprocess", res.returncode, res.stdout.strip())
    res = subprocess.run(["sort", "-r"], input=payload, capture_output=True, text=True)
    print("subprocess-sort", res.returncode, res.stdout.splitlines()[:3])

    # fork(): the child must be able to allocate at once.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            stuff = {i: [str(i)] * 3 for i in range(30000)}
            out = json.dumps({"ok": len(stuff)}).encode()
            os.write(w, out)
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    print("fork", os.waitstatus_to_exitcode(status), b"".join(chunks).decode())


def main():
    rng = random.Random(12345)
    dicts(rng)
    lists_and_sorting(rng)
    json_round_trip()
    threads()
    child_processes()
    print("done")


if __name__ == "__main__":
    main()
