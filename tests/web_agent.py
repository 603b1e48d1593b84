"""Run by tests/web.rs as uid 1000, the agent, against `scratchfs web` on PORT.

`probe PORT`: every way to the data without the token is refused; prints
`probe: A B C` (the statuses) after checking that no token file is readable.
`flood PORT`: opens 1,100 connections and keeps them until the server has closed all but
its share; prints `flood: held H closed C`, then holds them until stdin closes."""

import os
import resource
import socket
import sys
import time

mode, port = sys.argv[1], int(sys.argv[2])


def status(path, token=None):
    s = socket.create_connection(("127.0.0.1", port))
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n".encode())
    head = s.recv(64).decode(errors="replace")
    s.close()
    return head.split(" ")[1]


if mode == "probe":
    a = status("/api/timeline")
    b = status("/api/timeline", "0" * 40)
    c = status("/api/live", "x")
    # The newer endpoints are behind the same check.
    for path in ["/api/activity", "/api/refused?event=1", "/api/compare?from=now&to=now"]:
        got = status(path)
        if got != "401":
            sys.exit(f"uid 1000 got {got} for {path} without the token")
    for name in os.listdir("/run/scratchfs") if os.access("/run/scratchfs", os.R_OK) else []:
        if name.startswith("web-"):
            try:
                open(os.path.join("/run/scratchfs", name)).read()
                sys.exit(f"uid 1000 read {name}")
            except OSError:
                pass
    print(f"probe: {a} {b} {c}", flush=True)
elif mode == "flood":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    N = 1100
    started = time.monotonic()
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(N)]
    for c in conns:
        c.setblocking(False)

    def closed(c):
        try:
            c.recv(1)
            return True  # end of file: the server closed it
        except BlockingIOError:
            return False
        except OSError:
            return True

    # Waits for the server, never for a fixed time: tests/web.rs bounds the whole run.
    while True:
        n_closed = sum(1 for c in conns if closed(c))
        if n_closed >= N - 64:
            break
        time.sleep(0.01)
    print(f"flood: held {N - n_closed} closed {n_closed} in {time.monotonic() - started:.1f} s", flush=True)
    sys.stdin.read()
