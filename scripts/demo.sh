#!/usr/bin/env bash
# A short agent-like session on a fresh scratchpad, then the provenance of every version.
#   scripts/demo.sh            (builds scratchfs if needed; needs root or fuse3 + sqlite3)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${SCRATCHFS_BIN:-${CARGO_TARGET_DIR:-$here/target}/release/scratchfs}
[ -x "$bin" ] || cargo build --release --locked --manifest-path "$here/Cargo.toml" >&2
work=$(mktemp -d /tmp/scratchfs-demo.XXXXXX)
mnt=$work/mnt; db=$work/scratchpad.db
mkdir -p "$mnt"
trap '"$bin" unmount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null; rm -rf "$work"' EXIT
"$bin" mount "$mnt" --db "$db" --background
cd "$mnt"

# Each step runs the way an agent harness runs a tool call: a fresh process whose
# environment carries the step (SCRATCHFS_STEP) and, for tools, the writer tag.
step() { local n=$1; shift; SCRATCHFS_STEP=$n "$@"; }

# Step 1: the agent writes its plan (shell heredoc).
step 1 bash -c "cat > plan.md <<'PLAN'
# Plan
## Goal
Refund the customer for order 1042 if it was double-charged.
## Steps
1. Look up the order.
2. Compare charges.
PLAN"

# Step 2: a tool process fetches the order and writes it into state.json.
step 2 env SCRATCHFS_WRITER=get_order python3 -c '
import json, os
state = json.load(open("state.json"))
state.update(order_id="1042", order_total_cents=18000)
with open("state.json.tmp", "w") as f:
    json.dump(state, f, indent=2); f.write("\n")
os.replace("state.json.tmp", "state.json")'

# Step 3: the agent notes a finding (shell append).
step 3 bash -c 'echo "- order 1042 total is 180.00 (from get_order)" >> findings.md'

# Step 4: a second tool appends what it found.
step 4 env SCRATCHFS_WRITER=charges python3 -c '
with open("findings.md", "a") as f:
    f.write("- two charges of 180.00 on 2026-11-29\n")'

# Step 5: the agent updates its plan in place (sed -i renames a temp file over it).
step 5 sed -i 's/^2. Compare charges./2. Compare charges: done, double charge confirmed./' plan.md

# Step 6: the agent records a decision with jq; a scratch file comes and goes.
step 6 bash -c 'jq ".decision = \"refund one charge\"" state.json > state.tmp && mv state.tmp state.json
echo draft > scratch.txt; rm scratch.txt'

cd /
echo "== state.json"; cat "$mnt/state.json"
echo
echo "== provenance of every version (sqlite3 $db)"
sync "$mnt"   # the daemon writes what it acknowledged to the database at once
sqlite3 -header -column "$db" "
  SELECT version AS v, path, op, size, writer, step, replace(exe, rtrim(exe, replace(exe, '/', '')), '') AS exe,
         substr(blake3, 1, 12) AS blake3
  FROM version_log ORDER BY id"
echo
echo "== other events"
sqlite3 -header -column "$db" "
  SELECT op, path, COALESCE(new_path, '') AS new_path, writer, step FROM event_log
  WHERE op <> 'setattr' ORDER BY id"
