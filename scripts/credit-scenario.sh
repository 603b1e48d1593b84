#!/usr/bin/env bash
# The seeds' refund scenario under the SPEC §5 example rules: only the get_order tool may
# write order_total_cents, so a number the model asserts has nowhere to go.
#   scripts/credit-scenario.sh     (as root: tools run tagged, the agent as uid 1000)
# It ends with the lineage of credit_cents (scratchfs why) and the grounding of a good
# and a bad reply (scratchfs ground).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${SCRATCHFS_BIN:-${CARGO_TARGET_DIR:-$here/target}/release/scratchfs}
[ -x "$bin" ] || cargo build --release --locked --manifest-path "$here/Cargo.toml" >&2
work=$(mktemp -d /tmp/scratchfs-credit.XXXXXX)
chmod 755 "$work"
mnt=$work/mnt; export SCRATCHFS_DB=$work/scratchpad.db
mkdir -p "$mnt"
trap '"$bin" unmount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null; rm -rf "$work"' EXIT
rules=$here/examples/spec-rules.json   # the SPEC §5 example rules
"$bin" mount "$mnt" --background --owner 1000:1000 --rules "$rules"
cd "$mnt"

# set_state STEP WRITER-TAG KEY VALUE: a tool process updating one key of state.json.
set_state() {
  SCRATCHFS_STEP=$1 SCRATCHFS_WRITER=$2 python3 - "$3" "$4" <<'PY'
import errno, json, sys
key, value = sys.argv[1], json.loads(sys.argv[2])
state = json.load(open("state.json"))
state[key] = value
f = open("state.json", "w")
json.dump(state, f, indent=2)
try:
    f.close()
    print(f"  {key} = {json.dumps(value)}: committed")
except OSError as e:
    print(f"  {key} = {json.dumps(value)}: refused, {errno.errorcode[e.errno]} ({e.strerror})")
PY
}
agent() { SCRATCHFS_STEP=$1 setpriv --reuid 1000 --regid 1000 --clear-groups bash -c "$2"; }

echo "== step 1: the trigger opens the ticket"
set_state 1 trigger ticket_id '"T-881"'
echo "== step 2: the get_order tool reads the order"
set_state 2 get_order order_id '"O-9"'
set_state 2 get_order order_total_cents 36000
echo "== step 3: the agent plans and notes what it found"
agent 3 'printf "# Plan\n## Goal\nRefund the double charge on order O-9.\n" > plan.md'
agent 3 'echo "- the order was charged twice (ticket T-881)" >> findings.md'
echo "== step 4: the agent asserts a credit of 540.00 (it may not), and notes it"
agent 4 'echo "- the credit should be 540.00" >> findings.md'
agent 4 "$(declare -f set_state); set_state 4 '' credit_cents 54000"
echo "== step 5: compute_credit computes the credit (half the total it read)"
SCRATCHFS_STEP=5 SCRATCHFS_WRITER=compute_credit python3 - <<'PY'
import json
state = json.load(open("state.json"))
state["credit_cents"] = state["order_total_cents"] // 2
with open("state.json", "w") as f:
    json.dump(state, f, indent=2)
print(f"  credit_cents = {state['credit_cents']}: committed")
PY
echo "== step 6: a human approves"
SCRATCHFS_STEP=6 set_state 6 '' approval '{"by": "human", "ok": true}'

cd /
echo
echo "== state.json, each field with its writer and step (sqlite3 $SCRATCHFS_DB)"
sync "$mnt"   # the daemon writes what it acknowledged to the database at once
sqlite3 -header -column "$SCRATCHFS_DB" "
  SELECT f.key, v.version, v.writer, v.step,
         replace(v.exe, rtrim(v.exe, replace(v.exe, '/', '')), '') AS exe
  FROM fields f JOIN version_log v ON v.id = f.version_id ORDER BY v.version, f.key"
echo
echo "== the refused attempt (scratchfs log --rejected)"
"$bin" log --rejected | cut -c23-
echo
echo "== MANIFEST"
cat "$mnt/MANIFEST"
echo
echo "== where credit_cents came from (scratchfs why state.json:credit_cents)"
"$bin" why state.json:credit_cents
echo
echo "== a reply with grounded numbers (scratchfs ground)"
reply='We will refund $180 on order O-9.'
echo "$reply"
echo "$reply" | "$bin" ground && echo "(exit 0)"
echo
echo "== a reply with a number only the agent asserted"
reply='We will refund $540 on order O-9.'
echo "$reply"
status=0; echo "$reply" | "$bin" ground || status=$?
echo "(exit $status)"
