"""The SQL models of queries/ over the store, run in DuckDB.

- ``catalogue``: what each model in queries/ is, what it reads, how it is kept.
- ``db``: a DuckDB connection over the store: a view per table, the models defined on
  first use, the settings (``DEFAULT_PARAMS``) every surface shares.
- ``stored``: the models kept with each capture, computed when it is committed.
"""
