#!/usr/bin/env python3
"""Bench row 11 (issue 12): the latency of MCP tool calls, as a client sees it.

usage: bench-mcp.py RESULTS TARGET SCRATCHFS_BIN DB N [MOUNTPOINT]

Starts `scratchfs mcp --db DB` over stdio with the official MCP Python SDK (DB may be
mounted: the calls then run in the mount's daemon), makes N `write` calls of 4 KiB (a
new content each) and N `read` calls of one section of a 40-section Markdown file, and
appends the medians, in ms, to RESULTS as `TARGET<TAB>mcp_write_ms<TAB>x` and
`mcp_read_ms` lines (scripts/bench's format). Where the server has the `search` tool
(issue 33), also the first search for a literal (`mcp_search_first_ms`: it builds the
text index over the whole tree, 100,000+ files in the full run) and the median of N
searches for it, each after a write (`mcp_search_ms`: one changed file to index).
With MOUNTPOINT (DB's mount), a session subscribed to `scratchpad://MANIFEST` is told of
20 writes through the mount, one at a time: the median from the write's close to the
`notifications/resources/updated` (`mcp_update_ms`; the server compares every 250 ms).
"""
import asyncio
import statistics
import sys
import time

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def updates(params, mnt, rounds=20):
    """Milliseconds from each write's close to the MANIFEST update."""
    seen = asyncio.Event()

    async def on_message(m):
        if isinstance(m, types.ResourceUpdatedNotification) and str(m.params.uri) == "scratchpad://MANIFEST":
            seen.set()

    out = []
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w, message_handler=on_message) as s:
            await s.initialize()
            await s.subscribe_resource("scratchpad://MANIFEST")
            for i in range(rounds):
                await asyncio.sleep(0.3)
                seen.clear()
                with open(f"{mnt}/bench/update.md", "w") as f:
                    f.write(f"round {i}\n")
                t0 = time.perf_counter()
                await asyncio.wait_for(seen.wait(), 30)
                out.append((time.perf_counter() - t0) * 1e3)
    return out


async def main():
    out, target, binary, db, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    params = StdioServerParameters(command=binary, args=["mcp", "--db", db, "--writer", "bench"])
    doc = "".join(f"## Section {i}\n" + f"line {i} of the notes\n" * 20 for i in range(40))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            await s.call_tool("write", {"path": "bench/doc.md", "content": doc})
            await s.call_tool("write", {"path": "bench/needle.md", "content": "a\nthe needle-x7q3 is here\n"})
            tools = {t.name for t in (await s.list_tools()).tools}
            searches, search_first = [], None
            if "search" in tools:
                t0 = time.perf_counter()
                res = await s.call_tool("search", {"pattern": "needle-x7q3"})
                search_first = time.perf_counter() - t0
                assert not res.is_error and res.structured_content["matches"], res
            writes, reads = [], []
            for i in range(n):
                body = (f"{i:08d} " * 456)[:4096]
                t0 = time.perf_counter()
                res = await s.call_tool("write", {"path": "bench/w.md", "content": body})
                writes.append(time.perf_counter() - t0)
                assert not res.is_error, res
                t0 = time.perf_counter()
                res = await s.call_tool("read", {"path": "bench/doc.md", "section": f"Section {i % 40}"})
                reads.append(time.perf_counter() - t0)
                assert not res.is_error, res
                if search_first is not None:
                    t0 = time.perf_counter()
                    res = await s.call_tool("search", {"pattern": "needle-x7q3"})
                    searches.append(time.perf_counter() - t0)
                    assert not res.is_error and len(res.structured_content["matches"]) == 1, res
    updated = await updates(params, sys.argv[6]) if len(sys.argv) > 6 else None
    with open(out, "a") as f:
        if updated:
            f.write(f"{target}\tmcp_update_ms\t{statistics.median(updated)}\n")
        f.write(f"{target}\tmcp_write_ms\t{statistics.median(writes) * 1e3}\n")
        f.write(f"{target}\tmcp_read_ms\t{statistics.median(reads) * 1e3}\n")
        if search_first is not None:
            f.write(f"{target}\tmcp_search_first_ms\t{search_first * 1e3}\n")
            f.write(f"{target}\tmcp_search_ms\t{statistics.median(searches) * 1e3}\n")
    print(f"         {target:9} mcp: {n} writes of 4 KiB, median {statistics.median(writes) * 1e3:.2f} ms; "
          f"{n} section reads, median {statistics.median(reads) * 1e3:.2f} ms", file=sys.stderr)
    if updated:
        print(f"         {target:9} mcp: {len(updated)} updates after a write through the mount, "
              f"median {statistics.median(updated):.0f} ms, most {max(updated):.0f} ms", file=sys.stderr)
    if search_first is not None:
        print(f"         {target:9} mcp: first search {search_first * 1e3:.0f} ms (the index built); "
              f"{n} searches after a write, median {statistics.median(searches) * 1e3:.2f} ms", file=sys.stderr)


asyncio.run(main())
