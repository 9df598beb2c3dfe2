"""The report: the queries/ models' answers laid out for people and scripts. No analysis.

- ``sections``: runs the models and returns the report's sections; prints them.
- ``render``: terminal tables, Markdown, JSON, CSV of named sections of rows.
- ``html``: the report as one self-contained HTML file with its plots.
"""
