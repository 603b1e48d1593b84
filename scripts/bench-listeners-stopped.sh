#!/usr/bin/env bash
# scripts/bench-listeners-stopped.sh - what daemon `a` pays for three other daemons of its
# PostgreSQL scratchpad, apart from their CPU (issue 34 item 2's "creates on one daemon
# while 3 others are mounted at least 0.8x its rate alone", session 32). On one 2-core
# host the three listeners' own work lands on the cores `a` uses; on a fleet it is on
# other hosts. So, per round: `a`'s rate alone; with the three mounted and running; and
# with the three mounted but stopped (SIGSTOP: their sessions stay, the server still sends
# them every notification, `a` still notifies them in each commit). 1,500 creates of 4 KiB
# each. As root, on scripts/pg's server (started before); database t_fl3, dropped at the
# end. Usage: scripts/bench-listeners-stopped.sh [BIN]
set -uo pipefail
BIN=${1:-$(cd "$(dirname "$0")/.." && pwd)/target/release/scratchfs}; DB=t_fl3
PSQL="runuser -u scratchfs-pg -- /usr/lib/postgresql/15/bin/psql -h /var/tmp/scratchfs-pg/run -p 54329 -U postgres -d postgres"
$PSQL -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB OWNER scratchfs" >/dev/null 2>&1
U="postgres://scratchfs@127.0.0.1:54329/$DB?sslmode=disable"
for d in a b c d; do mkdir -p /tmp/fl-$d; done
$BIN mount --db "$U" /tmp/fl-a --background >/dev/null 2>&1
rate() { python3 - "$1" <<'PY'
import sys, time, os
d=sys.argv[1]; os.makedirs(d, exist_ok=True); n=1500
t=time.monotonic()
for i in range(n):
    with open(f"{d}/f{i}","w") as f: f.write("y"*4096)
print(f"{n/(time.monotonic()-t):.0f}")
PY
}
for r in 1 2 3; do
  alone=$(rate /tmp/fl-a/alone$r)
  for d in b c d; do $BIN mount --db "$U" /tmp/fl-$d --background >/dev/null 2>&1; done
  running=$(rate /tmp/fl-a/running$r)
  pids=$(for d in b c d; do pgrep -f "scratchfs mount /tmp/fl-$d" ; done)
  kill -STOP $pids
  stopped=$(rate /tmp/fl-a/stopped$r)
  kill -CONT $pids
  for d in b c d; do $BIN unmount /tmp/fl-$d >/dev/null 2>&1; done
  echo "round $r: alone $alone/s, 3 others mounted and running $running/s ($(echo "scale=2; $running/$alone" | bc)), 3 others mounted but stopped $stopped/s ($(echo "scale=2; $stopped/$alone" | bc))"
done
$BIN unmount /tmp/fl-a >/dev/null 2>&1
$PSQL -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1
