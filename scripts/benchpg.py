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


def new_database(prefix, tls):
    """Starts scripts/pg's server if needed and creates the database PREFIX_PID; returns
    (the server's admin URL, the database's name, the URL the daemons use: plain text,
    or scripts/pg's verify-full parameters with `tls`)."""
    base = sh(os.path.join(ROOT, "scripts/pg"), "start").strip().splitlines()[-1]
    db = f"{prefix}_{os.getpid()}"
    query = "sslmode=disable"
    if tls:
        query = sh(os.path.join(ROOT, "scripts/pg"), "url", "--tls").strip().split("?", 1)[1]
    url = base.rsplit("/", 1)[0] + "/" + db + "?" + query
    sh("psql", base, "-X", "-q", "-c", f"CREATE DATABASE {db}")
    return base, db, url


def drop_database(base, db):
    subprocess.run(["psql", base, "-X", "-q", "-c", f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"])
