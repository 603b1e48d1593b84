#!/usr/bin/env python3
"""A short agent session through scratchfs's MCP server with the official MCP Python SDK.

usage: scripts/mcp-session.py [SCRATCHFS_BIN]

Starts `scratchfs mcp` over stdio on a fresh database in a temporary directory (no FUSE
needed), lists the tools, then plans, notes, edits and looks back the way an agent with
tools but no shell would, printing each call and its result. Run it with the repository's
virtual environment (scripts/deps installs `mcp` there): .venv/bin/python3 scripts/mcp-session.py
"""
import asyncio
import json
import os
import sys
import tempfile

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "scratchfs")


async def main():
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "scratchpad.db")
        params = StdioServerParameters(command=BIN, args=["mcp", "--db", db, "--writer", "planner"])
        async with stdio_client(params) as (r, w):
            info = types.Implementation(name="mcp-session", version="1.0")
            async with ClientSession(r, w, client_info=info) as s:
                init = await s.initialize()
                tools = await s.list_tools()
                print(f"== {init.server_info.name} {init.server_info.version}: "
                      + ", ".join(t.name for t in tools.tools))

                async def call(name, **args):
                    res = await s.call_tool(name, args)
                    text = "".join(getattr(b, "text", "") for b in res.content)
                    print(f"> {name} {json.dumps(args)}")
                    print(("ERROR: " if res.is_error else "") + text.rstrip("\n"))

                await call("write", path="plan.md", step=1, content=(
                    "# Plan\n## Goal\nRefund the double charge on order 1042.\n"
                    "## Steps\n1. Find the charges.\n2. Ask compute_credit.\n"))
                await call("append", path="findings.md", step=2, content="- two charges of 180.00 on 2026-11-30\n")
                await call("replace", path="plan.md", step=3, find="1. Find the charges.",
                           **{"with": "1. Find the charges. (done: two of 180.00)"})
                await call("replace", path="plan.md", find="the", **{"with": "a"})
                await call("read", path="plan.md", section="Steps")
                await call("outline", path="plan.md")
                await call("history", path="plan.md")
                await call("diff", path="plan.md", **{"from": 1})
                await call("read", path="../etc/passwd")
                await call("list")
        # The provenance, as `scratchfs log` shows it.
        print("== scratchfs log")
        os.system(f"{BIN} log --db {db} | tail -4")


asyncio.run(main())
