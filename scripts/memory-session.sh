#!/usr/bin/env bash
# Anthropic's memory tool backend on a fresh scratchpad: a session of view, create,
# str_replace, insert, rename and delete; then each operation in `scratchfs log` and
# `scratchfs history`, the deleted memory restored from .archive, and fsck.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${SCRATCHFS_BIN:-${CARGO_TARGET_DIR:-$here/target}/release/scratchfs}
[ -x "$bin" ] || cargo build --release --locked --manifest-path "$here/Cargo.toml" >&2
"$here/scripts/deps" >&2   # .venv with the anthropic package
py=$here/.venv/bin/python3
work=$(mktemp -d /tmp/scratchfs-memory.XXXXXX)
mnt=$work/mnt; export SCRATCHFS_DB=$work/scratchpad.db
mkdir -p "$mnt"
trap '"$bin" unmount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null; rm -rf "$work"' EXIT
"$bin" mount "$mnt" --background

echo "== the session (SCRATCHFS_WRITER=memory_tool)"
SCRATCHFS_WRITER=memory_tool SCRATCHFS_STEP=1 "$py" "$here/scripts/memory-session.py" "$mnt"
echo
echo "== scratchfs log (the memory files)"
"$bin" log | grep memories/ | cut -c23-
echo
echo "== scratchfs history memories/customers/1042.md"
"$bin" history memories/customers/1042.md | cut -c29-
echo
echo "== restore the deleted memory from .archive"
ls "$mnt/.archive/memories"
cp "$mnt/.archive/memories/scratch.md" "$mnt/memories/scratch.md"
cat "$mnt/memories/scratch.md"
echo
echo "== fsck"
"$bin" fsck
