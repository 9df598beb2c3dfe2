"""The `tailtap` command line.

- ``main``: the entry point; a plain `analyze` or `sql` command line runs without typer.
- ``app``: the typer app, every verb (mounts the daemon's and the lab's).
- ``analyze``: the `analyze` verb (ingest, then the report).
- ``sql``: the `sql` verb (one query, every model readable by name).
- ``args``: the verbs' values, parsed the same way on both paths.
"""
