"""A real MCP client for tests/mcp.rs: the official MCP Python SDK (PyPI `mcp`).

usage: mcp_client.py NAME stdio CMD [ARG...] < calls.json
       mcp_client.py NAME http URL [TOKEN_FILE] < calls.json

Over https, MCP_CA_FILE names the PEM file of the one CA the client trusts (without it:
the default trust store, which knows no test CA).

NAME is the client's name in its handshake (clientInfo). calls.json is a JSON list of
{"tool": NAME, "args": {...}}, or {"cat": PATH} to read a file (through a mount) in
between. Prints one JSON object: the server's name, the tools it
lists (name and description), and each call's result (is_error, text, structured).
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


async def session(name, read, write, calls):
    info = types.Implementation(name=name, version="9.9")
    async with ClientSession(read, write, client_info=info) as s:
        init = await s.initialize()
        tools = await s.list_tools()
        out = {
            "server": init.server_info.name,
            "instructions": init.instructions,
            "tools": [{"name": t.name, "description": t.description, "schema": t.input_schema} for t in tools.tools],
            "results": [],
        }
        for c in calls:
            if "cat" in c:
                # A read through the mount between two calls, within the kernel's cache
                # timeouts (1 s): what a process on the mount sees at once.
                try:
                    with open(c["cat"], "rb") as f:
                        text = f.read().decode("utf-8", "replace")
                    out["results"].append({"is_error": False, "text": text, "structured": None})
                except OSError as e:
                    out["results"].append({"is_error": True, "text": str(e), "structured": None})
                continue
            r = await s.call_tool(c["tool"], c.get("args", {}))
            out["results"].append({
                "is_error": bool(r.is_error),
                "text": "".join(getattr(b, "text", "") for b in r.content),
                "structured": r.structured_content,
            })
        return out


async def main():
    name, mode = sys.argv[1], sys.argv[2]
    calls = json.load(sys.stdin)
    if mode == "stdio":
        params = StdioServerParameters(command=sys.argv[3], args=sys.argv[4:])
        async with stdio_client(params) as (r, w):
            out = await session(name, r, w, calls)
    else:
        # The server's bearer token (scratchfs mcp --listen): the first line of the file
        # named by the optional fourth argument.
        headers = {}
        if len(sys.argv) > 4:
            with open(sys.argv[4]) as f:
                headers["Authorization"] = "Bearer " + f.readline().strip()
        import httpx2
        verify = True
        if os.environ.get("MCP_CA_FILE"):
            import ssl
            verify = ssl.create_default_context(cafile=os.environ["MCP_CA_FILE"])
        # MCP_SESSIONS=N: N sessions in a row (each its own HTTP client, as a harness that
        # opens one per task); "sessions" says which had no failed call.
        n = int(os.environ.get("MCP_SESSIONS", "1"))
        ok = []
        for _ in range(n):
            async with httpx2.AsyncClient(headers=headers, timeout=60, verify=verify) as client:
                async with streamable_http_client(sys.argv[3], http_client=client) as streams:
                    out = await session(name, streams[0], streams[1], calls)
            ok.append(not any(r["is_error"] for r in out["results"]))
        out["sessions"] = ok
    print(json.dumps(out))


asyncio.run(main())
