"""scripts/benchpg.py - what the PostgreSQL benches share (bench-fleet.py, bench-pads.py):
a throwaway database on scripts/pg's server for one run."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(*cmd, **kw):
    """Runs `cmd`; its standard output, or exits with its status and standard error."""
    r = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def new_database(prefix, tls, pooler=False):
    """Starts scripts/pg's server if needed and creates the database PREFIX_PID; returns
    (the server's admin URL, the database's name, the URL the daemons use: plain text,
    or scripts/pg's verify-full parameters with `tls`; through scripts/pg's PgBouncer in
    transaction mode with `pooler`, its listener direct)."""
    base = sh(os.path.join(ROOT, "scripts/pg"), "start").strip().splitlines()[-1]
    db = f"{prefix}_{os.getpid()}"
    query = "sslmode=disable"
    if tls:
        query = sh(os.path.join(ROOT, "scripts/pg"), "url", "--tls").strip().split("?", 1)[1]
    server = base.rsplit("/", 1)[0]
    if pooler:
        pooled = sh(os.path.join(ROOT, "scripts/pg"), "url", "--pooler").strip()
        server = pooled.split("?", 1)[0].rsplit("/", 1)[0]
        direct_port = base.rsplit(":", 1)[1].split("/", 1)[0]
        query += f"&pooler=transaction&direct_port={direct_port}"
    url = server + "/" + db + "?" + query
    sh("psql", base, "-X", "-q", "-c", f"CREATE DATABASE {db}")
    return base, db, url


def drop_database(base, db):
    subprocess.run(["psql", base, "-X", "-q", "-c", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"])
