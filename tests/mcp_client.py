"""A real MCP client for tests/mcp.rs: the official MCP Python SDK (PyPI `mcp`).

usage: mcp_client.py NAME stdio CMD [ARG...] < calls.json
       mcp_client.py NAME http URL [TOKEN_FILE] < calls.json

Over https, MCP_CA_FILE names the PEM file of the one CA the client trusts (without it:
the default trust store, which knows no test CA).

MCP_ERA=2026-07-28 makes the client fastmcp 4 (PyPI `fastmcp`) speaking the stateless
revision (no `initialize`: `server/discover`, the client's name in each request's
`_meta`); without it, the Python SDK speaks 2025-11-25 (an `initialize` handshake).

NAME is the client's name (clientInfo). calls.json is a JSON list of
{"tool": NAME, "args": {...}}, or {"cat": PATH} to read a file (through a mount) in
between, {"touch": PATH} to make a file, {"wait_for": PATH} to wait until one exists. Prints one JSON object: the server's name, the tools it
lists (name and description), and each call's result (is_error, text, structured).
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def tool_json(t):
    return {
        "name": t.name,
        "title": t.title,
        "description": t.description,
        "schema": t.input_schema,
        "output_schema": t.output_schema,
        "annotations": t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else None,
    }


async def run_calls(out, call, calls):
    for c in calls:
        if "touch" in c:
            # Tells the test this session got this far (a file it waits for).
            open(c["touch"], "w").close()
            continue
        if "wait_for" in c:
            # Waits (up to 120 s) for a file another session or the test makes.
            for _ in range(12000):
                if os.path.exists(c["wait_for"]):
                    break
                await asyncio.sleep(0.01)
            else:
                raise SystemExit("waited 120 s for " + c["wait_for"])
            continue
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
        r = await call(c["tool"], c.get("args", {}))
        out["results"].append({
            "is_error": bool(r.is_error),
            "text": "".join(getattr(b, "text", "") for b in r.content),
            "structured": r.structured_content,
        })
    return out


async def session(name, read, write, calls):
    info = types.Implementation(name=name, version="9.9")
    async with ClientSession(read, write, client_info=info) as s:
        init = await s.initialize()
        tools = await s.list_tools()
        out = {
            "server": init.server_info.name,
            "protocol": init.protocol_version,
            "instructions": init.instructions,
            "tools": [tool_json(t) for t in tools.tools],
            "results": [],
        }
        return await run_calls(out, s.call_tool, calls)


async def modern(name, transport, calls):
    """The same session with fastmcp 4 at MCP 2026-07-28 (stateless)."""
    from fastmcp import Client
    info = types.Implementation(name=name, version="9.9")
    async with Client(transport, mode="2026-07-28", client_info=info) as c:
        tools = await c.list_tools()
        out = {
            "server": None,
            "protocol": c.protocol_version,
            "instructions": None,
            "tools": [tool_json(t) for t in tools],
            "results": [],
        }
        return await run_calls(out, lambda t, a: c.call_tool(t, a, raise_on_error=False), calls)


async def main():
    name, mode = sys.argv[1], sys.argv[2]
    calls = json.load(sys.stdin)
    if os.environ.get("MCP_ERA") == "2026-07-28":
        from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
        if mode == "stdio":
            transport = StdioTransport(command=sys.argv[3], args=sys.argv[4:])
        else:
            headers = {}
            if len(sys.argv) > 4:
                with open(sys.argv[4]) as f:
                    headers["Authorization"] = "Bearer " + f.readline().strip()
            transport = StreamableHttpTransport(sys.argv[3], headers=headers)
        out = await modern(name, transport, calls)
    elif mode == "stdio":
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
