"""A memory session through Anthropic's own memory tool backend, on a scratchfs mount.

Runs BetaLocalFilesystemMemoryTool (PyPI package `anthropic`; no API key: its execute()
takes the memory commands directly) with its base path on the mount, and prints each
command and its result. Usage: python3 scripts/memory-session.py MOUNTPOINT
"""

import sys

from anthropic.tools.memory import BetaLocalFilesystemMemoryTool
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand as Create,
    BetaMemoryTool20250818DeleteCommand as Delete,
    BetaMemoryTool20250818InsertCommand as Insert,
    BetaMemoryTool20250818RenameCommand as Rename,
    BetaMemoryTool20250818StrReplaceCommand as StrReplace,
    BetaMemoryTool20250818ViewCommand as View,
)

tool = BetaLocalFilesystemMemoryTool(base_path=sys.argv[1])
session = [
    View(command="view", path="/memories"),
    Create(
        command="create",
        path="/memories/customer_1042.md",
        file_text="# Customer 1042\n- prefers email\n- order 1042: 180.00\n",
    ),
    StrReplace(
        command="str_replace",
        path="/memories/customer_1042.md",
        old_str="- prefers email",
        new_str="- prefers email, never phone",
    ),
    Insert(
        command="insert",
        path="/memories/customer_1042.md",
        insert_line=3,
        insert_text="- double charge refunded on 2026-11-30\n",
    ),
    Create(command="create", path="/memories/scratch.md", file_text="temporary notes\n"),
    Rename(
        command="rename",
        old_path="/memories/customer_1042.md",
        new_path="/memories/customers/1042.md",
    ),
    View(command="view", path="/memories/customers/1042.md"),
    Delete(command="delete", path="/memories/scratch.md"),
    View(command="view", path="/memories"),
]
for cmd in session:
    args = {k: v for k, v in cmd.model_dump().items() if k != "command" and v is not None}
    print(f"> {cmd.command} {args}")
    print(tool.execute(cmd))
