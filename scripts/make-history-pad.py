#!/usr/bin/env python3
"""scripts/make-history-pad.py MOUNTPOINT - add about 900,000 versions to a mounted
scratchpad, as docs/benchmarks.md's history-search figures were made (issue 33): 2,000 logs
under logs/ appended to 250 times each, then 20,000 files d000/f00000.md ... rewritten 20
times each (made first by the 100,000-file pad of the same section, or made here). Takes
about 6 minutes on the 2-core test machine. Prints progress: versions written, seconds."""
import os, random, sys, time

root = sys.argv[1]
random.seed(2)
words = ("the agent read a tool result and wrote findings about latency budget cache plan "
         "step error retry value").split()
os.makedirs(os.path.join(root, "logs"), exist_ok=True)
t0, n = time.time(), 0
for r in range(250):
    for i in range(2000):
        with open(os.path.join(root, "logs", "log%04d.txt" % i), "a") as f:
            f.write("step %d %s ev%d-%d\n" % (r, " ".join(random.choice(words) for _ in range(6)), i, r))
        n += 1
    if r % 25 == 0:
        print(n, round(time.time() - t0, 1), flush=True)
for r in range(20):
    for i in range(20000):
        d = os.path.join(root, "d%03d" % (i // 1000))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%05d.md" % i), "w") as f:
            for l in range(8):
                f.write(" ".join(random.choice(words) for _ in range(10)) + " id%d r%d\n" % (i * 8 + l, r))
        n += 1
    print(n, round(time.time() - t0, 1), flush=True)
print("done", n, round(time.time() - t0, 1), flush=True)
