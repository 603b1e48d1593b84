#!/usr/bin/env python3
"""scripts/bench-policy.py [--db DB] [--rounds N] - the retention policy's cost (issue 36),
as docs/benchmarks.md "Issue 36" reports it. Run as root.

DB: an unmounted SQLite scratchpad with many versions (scripts/make-history-pad.py makes
900,000 in about 5 minutes on a mount of a fresh pad; give its database here), or a
PostgreSQL URL of one. The database is changed: the policy forgets most of it; on SQLite
the file is copied first and the copy used (DB itself is left as it was).

Measures, in one run:
1. creates and appends per second through a mount with the rules `{"paths": [{"path":
   "**"}]}` (the policy off), then with `{"paths": [{"path": "**", "keep": {"versions":
   3}}]}` and a pass
   every second (the policy on), after the first pass forgot what they say, rounds
   interleaved off/on;
   with the CPU each operation took in the daemon and (given --postmaster) in the
   PostgreSQL server's processes;
2. that first pass: how long it took, the versions and bytes it forgot, its
   transactions and the longest (the time the store's write lock was held, from the
   daemon's log), and the daemon's peak resident memory before and after it (VmHWM).
"""
import argparse, os, re, shutil, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--db", required=True)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--ops", type=int, default=5000)
ap.add_argument("--interval", default="1", help="seconds between the daemon's passes while the rates are measured")
ap.add_argument("--postmaster", type=int, help="the PostgreSQL server's postmaster pid (on this machine): its children's CPU per operation is reported too")
ap.add_argument("--bin", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "scratchfs"))
a = ap.parse_args()

work = tempfile.mkdtemp(prefix="bench-policy-", dir="/var/tmp")
mnt = os.path.join(work, "m")
os.mkdir(mnt)
pg = a.db.startswith("postgres")
db = a.db if pg else os.path.join(work, "pad.db")
if not pg:
    shutil.copy(a.db, db)
rules = os.path.join(work, "rules.json")
with open(rules, "w") as f:
    f.write('{"paths": [{"path": "**", "keep": {"versions": 3}}]}')
# The policy off: the same rules without `keep` (the gate's own cost is in both).
plain = os.path.join(work, "plain.json")
with open(plain, "w") as f:
    f.write('{"paths": [{"path": "**"}]}')
log_path = os.path.join(work, "daemon.log")
daemon = None


def mount(with_rules, interval="60"):
    global daemon
    env = dict(os.environ, RUST_LOG="info,fuser=error", SCRATCHFS_POLICY_INTERVAL=interval)
    args = [a.bin, "mount", mnt, "--db", db, "--rules", rules if with_rules else plain]
    daemon = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=open(log_path, "a"))
    t = time.time()
    while not os.path.exists(os.path.join(mnt, "MANIFEST")):
        if daemon.poll() is not None:
            sys.exit("mount failed: " + open(log_path).read()[-2000:])
        if time.time() - t > 600:
            sys.exit("mount: no answer in 600 s")
        time.sleep(0.05)


def unmount():
    subprocess.run([a.bin, "unmount", mnt], check=True)
    daemon.wait(timeout=600)


def status(key):
    with open("/proc/%d/status" % daemon.pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024
    return None


HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU of one process, in seconds (proc(5), /proc/PID/stat fields 14-15)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / HZ
    except OSError:
        return 0.0


def server_cpu():
    """{pid: CPU seconds} of every child of the postmaster (the server's backends, its
    autovacuum, checkpointer and WAL writer), or {} without --postmaster."""
    if not a.postmaster:
        return {}
    kids = subprocess.run(["pgrep", "-P", str(a.postmaster)], capture_output=True, text=True).stdout.split()
    return {int(k): cpu_seconds(int(k)) for k in kids}


def timed(op):
    """Runs op() a.ops times: (per second, daemon CPU us per op, server CPU us per op)."""
    s0, d0 = server_cpu(), cpu_seconds(daemon.pid)
    t = time.perf_counter()
    for i in range(a.ops):
        op(i)
    took = time.perf_counter() - t
    s1, d1 = server_cpu(), cpu_seconds(daemon.pid)
    server = sum(s1[k] - s0.get(k, 0.0) for k in s1)
    return a.ops / took, (d1 - d0) / a.ops * 1e6, server / a.ops * 1e6


def rates(tag):
    d = os.path.join(mnt, "bench-%s-%d" % (tag, time.time_ns()))
    os.mkdir(d)

    def create(i):
        with open(os.path.join(d, "f%05d" % i), "w") as f:
            f.write("x\n")

    p = os.path.join(d, "log")

    def append(i):
        with open(p, "a") as f:
            f.write("line %d\n" % i)

    creates = timed(create)
    appends = timed(append)
    print("  %-3s creates %6.0f/s (daemon %3.0f us, server %3.0f us each)  appends %6.0f/s "
          "(daemon %3.0f us, server %3.0f us each)" % ((tag,) + creates + appends), flush=True)
    return creates, appends


def passes():
    """The daemon log's policy lines: (versions, refusals, bytes, transactions, longest ms,
    transactions over 50 ms)."""
    out = []
    for line in open(log_path):
        m = re.search(r"policy: forgot (\d+) versions, the content of (\d+) refusals and (\d+) bytes of content in (\d+) transactions \(the longest ([\d.]+) ms, (\d+) over 50 ms\)", line)
        if m:
            out.append(tuple(float(x) for x in m.groups()))
    return out


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


results = {"off": [], "on": []}
# Warm: the database read once (the first mount builds the new indexes of an older pad).
mount(False)
results["off"].append(rates("off"))
unmount()
# The first pass, measured alone.
mount(True, "1")
hwm0, rss0 = status("VmHWM"), status("VmRSS")
t0 = time.time()
while not passes():
    time.sleep(0.2)
    if time.time() - t0 > 3600:
        sys.exit("the first pass did not end in an hour")
took = time.time() - t0
hwm1 = status("VmHWM")
first = passes()[0]
unmount()
# The policy on: a pass every STRESS seconds (its default is 60), while the rates are
# measured over several passes.
for r in range(a.rounds):
    for tag in (("off", "on") if r % 2 == 0 else ("on", "off")):
        mount(tag == "on", a.interval)
        results[tag].append(rates(tag))
        unmount()

print("first pass: %d versions and %d bytes forgotten in %d transactions, the longest %.1f ms, "
      "%d over 50 ms; it ended within %.0f s of the mount" % (first[0], first[2], first[3], first[4], first[5], took))
print("daemon memory: VmHWM %d MiB before the pass (VmRSS %d MiB), %d MiB after" % (hwm0, rss0, hwm1))
rest = passes()[1:]
print("passes that ended while the rates were measured (one under way at an unmount does not count): %d, %d versions forgotten in %d transactions, the longest %.1f ms, %d over 50 ms"
      % (len(rest), sum(p[0] for p in rest), sum(p[3] for p in rest), max([p[4] for p in rest] or [0]), sum(p[5] for p in rest)))
# Each transaction over 50 ms, with its time (to set beside the server's log, e.g. its
# checkpoints: `log_checkpoints` is on by default).
for line in open(log_path):
    if "policy: a transaction of" in line:
        print("  " + line.strip())
for tag, what in (("off", "policy off"), ("on", "policy on (a pass every %ss)" % a.interval)):
    c = [median([x[0][k] for x in results[tag]]) for k in range(3)]
    ap_ = [median([x[1][k] for x in results[tag]]) for k in range(3)]
    print("%-30s creates %7.0f/s  appends %7.0f/s  (%d rounds)" % (what, c[0], ap_[0], len(results[tag])))
    print("%-30s CPU per create: daemon %.0f us, server %.0f us; per append: daemon %.0f us, server %.0f us"
          % ("", c[1], c[2], ap_[1], ap_[2]))
off_c = median([x[0][0] for x in results["off"]])
off_a = median([x[1][0] for x in results["off"]])
on_c = median([x[0][0] for x in results["on"]])
on_a = median([x[1][0] for x in results["on"]])
print("on/off: creates %.3f, appends %.3f" % (on_c / off_c, on_a / off_a))
if not pg:
    print("database file: %d bytes before, %d after" % (os.path.getsize(a.db), os.path.getsize(db)))
shutil.rmtree(work, ignore_errors=True)
