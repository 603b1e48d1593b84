#!/usr/bin/env python3
"""scripts/bench-pads.py - many scratchpads of one PostgreSQL database mounted at once
(issue 34 item 3).

Usage (as root; scripts/pg's throwaway server, started if needed):

    scripts/bench-pads.py [--bin BIN] [--pads N] [--tls] [--pooler] [--out FILE]

One database for the run (dropped at the end). `scratchfs pads create` makes N
scratchpads (default 50), one daemon mounts each (all on this host), and it measures:

  - the time to create them and to mount them (each mount returns once it answers);
  - the server's sessions while all are mounted (target: at most 3 per daemon), and how
    many are the daemons' listeners (with --pooler, the daemons go through scripts/pg's
    PgBouncer in transaction mode: their other sessions are the pooler's);
  - the daemons' resident memory (RSS, /proc), total and per daemon;
  - their CPU while idle for 10 s (the listeners' keep-alive);
  - a write then a read through every mount in turn (commit round trip per pad);
  - `scratchfs pads list` over them.

Nothing here polls with a fixed sleep other than 50 ms while unmounting.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchpg  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


sh = benchpg.sh


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def rss_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def daemon_pid(mnt):
    out = subprocess.run(["pgrep", "-f", f"scratchfs[^ ]* mount {mnt}( |$)"],
                         capture_output=True, text=True).stdout.split()
    if not out:
        sys.exit(f"no daemon found for {mnt}")
    return int(out[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/scratchfs"))
    ap.add_argument("--pads", type=int, default=50)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--pooler", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root (mounts)")
    base, db, url = benchpg.new_database("scratchfs_pads", args.tls, args.pooler)
    work = f"/var/tmp/scratchfs-pads-{os.getpid()}"
    names = [f"pad_{i:04d}" for i in range(args.pads)]
    mounted = []
    res = {"pads": args.pads, "tls": args.tls, "pooler": args.pooler}
    try:
        t = time.monotonic()
        for n in names:
            sh(args.bin, "pads", "create", n, "--db", url)
        res["create_s"] = time.monotonic() - t
        t = time.monotonic()
        for n in names:
            mnt = f"{work}/{n}"
            os.makedirs(mnt, exist_ok=True)
            sh(args.bin, "mount", mnt, "--db", f"{url}&options=-csearch_path%3D{n}",
               "--background", timeout=600)
            mounted.append((mnt, daemon_pid(mnt)))
        res["mount_s"] = time.monotonic() - t
        sessions, listeners = (
            int(x) for x in sh("psql", base.rsplit("/", 1)[0] + "/" + db + "?sslmode=disable",
                               "-X", "-qAt", "-F", " ", "-c",
                               "SELECT COUNT(*), COUNT(*) FILTER "
                               "(WHERE application_name LIKE 'scratchfs%') FROM pg_stat_activity "
                               "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            .split())
        res["sessions"] = sessions
        res["listener_sessions"] = listeners
        res["sessions_per_daemon"] = sessions / args.pads
        # A write then a read through each mount.
        lat = []
        for mnt, _ in mounted:
            t = time.monotonic()
            with open(f"{mnt}/plan.md", "w") as f:
                f.write("step 1\n")
            with open(f"{mnt}/plan.md") as f:
                assert f.read() == "step 1\n"
            lat.append((time.monotonic() - t) * 1e3)
        lat.sort()
        res["write_read_ms_p50"] = statistics.median(lat)
        res["write_read_ms_max"] = lat[-1]
        rss = [rss_bytes(p) for _, p in mounted]
        res["rss_mib_total"] = sum(rss) / 2**20
        res["rss_mib_per_daemon"] = statistics.mean(rss) / 2**20
        before = [cpu_ticks(p) for _, p in mounted]
        time.sleep(10)  # the measurement itself: idle CPU over 10 s
        after = [cpu_ticks(p) for _, p in mounted]
        res["idle_cpu_pct_all_daemons"] = (sum(after) - sum(before)) / TICK / 10 * 100
        t = time.monotonic()
        listed = json.loads(sh(args.bin, "pads", "list", "--json", "--db", url))
        res["pads_list_s"] = time.monotonic() - t
        assert len(listed) == args.pads, listed
        assert all(p["daemons"] == 1 for p in listed), listed
    finally:
        for mnt, pid in mounted:
            subprocess.run([args.bin, "unmount", mnt], timeout=120, capture_output=True)
        for _, pid in mounted:
            for _ in range(400):
                if not os.path.exists(f"/proc/{pid}"):
                    break
                time.sleep(0.05)
        benchpg.drop_database(base, db)
        shutil.rmtree(work, ignore_errors=True)
    out = json.dumps(res, indent=2)
    print(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
