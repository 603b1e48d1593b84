#!/usr/bin/env python3
"""scripts/bench-fleet.py - several daemons on one PostgreSQL scratchpad (issue 34 item 2).

Usage (as root; scripts/pg's throwaway server, started if needed):

    scripts/bench-fleet.py [--bin BIN] [--files N] [--daemons K] [--rounds R]
                           [--rm N] [--out FILE]

One database for the run (dropped at the end), one daemon `a` that makes every change,
K-1 others that listen (mounted as separate daemons on this host, standing in for other
hosts). It measures, first with a small tree (about 1,000 files) and then with N files
(default 100,000):

  - create rate on `a` alone, and with the K-1 others mounted (the ratio: target >= 0.8);
  - create-to-visible: `a` creates a file, each other daemon stats the name until it is
    there; the latency to the last of them, p50/p99 of R rounds (target p99 < 50 ms);
  - the listening daemons' CPU (user + system, /proc) per remote create, at both sizes
    (target: grows by less than 2x);
  - `rm -rf` of a directory of --rm files (default 10,000) on `a`: how long after it ends
    until the directory is gone on every other daemon (target < 1 s).

`--bin` runs another build (for a comparison with an earlier revision, run this script
once with each). The daemons connect with sslmode=disable, so that a build without TLS
compares on equal terms; `--tls` connects with scripts/pg's verify-full URL instead.
Nothing here polls with a fixed sleep other than 1 ms between stats.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchpg  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


sh = benchpg.sh


def cpu_ticks(pid):
    """utime + stime of process `pid` and its threads, in clock ticks (proc(5))."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


TICK = os.sysconf("SC_CLK_TCK")


class Daemon:
    def __init__(self, binary, url, mnt):
        self.binary, self.url, self.mnt = binary, url, mnt
        os.makedirs(mnt, exist_ok=True)
        t = time.monotonic()
        subprocess.run([binary, "mount", mnt, "--db", url, "--background"], check=True,
                       timeout=600)
        self.mount_s = time.monotonic() - t
        out = subprocess.run(["pgrep", "-f", f"scratchfs[^ ]* mount {mnt}( |$)"],
                             capture_output=True, text=True).stdout.split()
        if not out:
            sys.exit(f"no daemon found for {mnt}")
        self.pid = int(out[0])

    def path(self, rel):
        return os.path.join(self.mnt, rel)

    def unmount(self):
        subprocess.run([self.binary, "unmount", self.mnt], timeout=120)
        for _ in range(200):
            if not os.path.exists(f"/proc/{self.pid}"):
                return
            time.sleep(0.05)


def make_files(root, n, per_dir=1000, start=0):
    """Creates files root/dNNN/fNNNNNN (n of them, `per_dir` a directory); returns the
    rate in creates/s."""
    os.makedirs(root, exist_ok=True)
    t = time.monotonic()
    for i in range(start, start + n):
        d = os.path.join(root, f"d{i // per_dir:03d}")
        if i % per_dir == 0 or i == start:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:06d}"), "w") as f:
            f.write("x\n")
    return n / (time.monotonic() - t)


def wait_until(what, cond, limit=120.0):
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            sys.exit(f"not within {limit} s: {what}")
        time.sleep(0.001)


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def measure(a, others, tag, rounds, res):
    """The figures that need the others mounted: visibility, their CPU per create."""
    lat = []
    os.makedirs(a.path(f"vis-{tag}"))
    wait_until("the others see the directory", lambda: all(
        os.path.isdir(o.path(f"vis-{tag}")) for o in others))
    for i in range(rounds):
        name = f"vis-{tag}/v{i:05d}"
        t = time.monotonic()
        with open(a.path(name), "w") as f:
            f.write("v\n")
        for o in others:
            wait_until(f"{name} on {o.mnt}", lambda: os.path.exists(o.path(name)))
        lat.append((time.monotonic() - t) * 1000)
    res[f"{tag}_visible_p50_ms"] = quantile(lat, 0.5)
    res[f"{tag}_visible_p99_ms"] = quantile(lat, 0.99)
    # CPU of the listeners per remote create: a burst of creates on a, then wait until
    # every other daemon has them.
    n = 500
    before = [cpu_ticks(o.pid) for o in others]
    make_files(a.path(f"cpu-{tag}"), n, per_dir=n)
    last = a.path(f"cpu-{tag}/d000/f{n - 1:06d}")
    for o in others:
        rel = os.path.relpath(last, a.mnt)
        wait_until("the burst on the others", lambda: os.path.exists(o.path(rel)))
    # Let the refresh threads finish what they were told (the last file is seen as soon
    # as its own node is placed; what remains is the views).
    time.sleep(0.2)
    after = [cpu_ticks(o.pid) for o in others]
    per = [(y - x) / TICK * 1e6 / n for x, y in zip(before, after)]
    res[f"{tag}_listener_cpu_us_per_create"] = statistics.mean(per)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/scratchfs"))
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--daemons", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--rm", type=int, default=10_000)
    ap.add_argument("--rate-n", type=int, default=2000)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (mounts)")
    base, db, url = benchpg.new_database("scratchfs_fleet", args.tls)
    work = f"/var/tmp/scratchfs-fleet-{os.getpid()}"
    daemons = []
    res = {}
    try:
        a = Daemon(args.bin, url, f"{work}/a")
        daemons.append(a)
        # Small tree: about 1,000 files.
        res["small_rate_alone"] = make_files(a.path("base"), 1000)
        others = [Daemon(args.bin, url, f"{work}/o{i}") for i in range(1, args.daemons)]
        daemons += others
        measure(a, others, "small", args.rounds, res)
        for o in others:
            o.unmount()
            daemons.remove(o)
        # Large tree: N files, made with a alone.
        t = time.monotonic()
        make_files(a.path("big"), max(0, args.files - 2000))
        res["fill_s"] = time.monotonic() - t
        res["rate_alone"] = make_files(a.path("rate-alone"), args.rate_n)
        make_files(a.path("rmtree"), args.rm)
        others = [Daemon(args.bin, url, f"{work}/o{i}") for i in range(1, args.daemons)]
        daemons += others
        res["mount_s_large"] = max(o.mount_s for o in others)
        res["rate_with_others"] = make_files(a.path("rate-others"), args.rate_n)
        res["rate_ratio"] = res["rate_with_others"] / res["rate_alone"]
        measure(a, others, "large", args.rounds, res)
        for o in others:
            wait_until("rmtree on the others", lambda: os.path.isdir(o.path("rmtree")))
        t = time.monotonic()
        shutil.rmtree(a.path("rmtree"))
        end = time.monotonic()
        res["rm_s"] = end - t
        for o in others:
            wait_until("rmtree gone on the others", lambda: not os.path.exists(o.path("rmtree")))
        res["rm_visible_after_s"] = time.monotonic() - end
        res["cpu_growth"] = (res["large_listener_cpu_us_per_create"]
                             / max(res["small_listener_cpu_us_per_create"], 1e-9))
    finally:
        for d in daemons:
            d.unmount()
        benchpg.drop_database(base, db)
        shutil.rmtree(work, ignore_errors=True)
    targets = {
        "large_visible_p99_ms": ("<", 50),
        "rate_ratio": (">=", 0.8),
        "rm_visible_after_s": ("<", 1.0),
        "cpu_growth": ("<", 2.0),
    }
    lines = [f"bench-fleet: {args.bin}, {args.daemons} daemons, {args.files} files, "
             f"{args.rounds} rounds, rm of {args.rm}, {'TLS' if args.tls else 'plain text'}"]
    for k, v in res.items():
        mark = ""
        if k in targets:
            op, tgt = targets[k]
            ok = v < tgt if op == "<" else v >= tgt
            mark = f"   target {op} {tgt}: {'met' if ok else 'MISSED'}"
        lines.append(f"  {k:36} {v:12.3f}{mark}")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
