"""The catalogue of SQL models in queries/: what each is, what it reads, how it is kept.

Each file ``queries/<name>.sql`` is one model: a header comment saying what question it
answers, an optional ``-- depends_on: a, b`` line naming the views it reads, an optional
``-- materialize: ...`` line, and one SELECT. ``queries/_macros.sql`` holds the SQL macros
the models share (one definition of each predicate and constant).

How a model is kept (``-- materialize:``):

* ``view`` (default): a view, computed by every query that reads it.
* ``session``: computed once per connection, on first use (a temporary table): models the
  report reads several times over.
* ``capture``: computed once per capture, when it is ingested, with the default settings,
  and stored with it (``ROOT/models/<key>/<name>/<capture_id>.parquet``, replaced with
  the capture). Such a model's rows must belong to one capture each (a ``capture_id``
  column) and carry the time the scope filters on (``started_at``), so that the stored
  rows of the captures in scope are the answer. ``<key>`` names the model's SQL, the SQL
  of everything it reads and the default settings it was computed with: another tailtap
  version, or other settings, compute it afresh.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

from telemetry.store.schema import COLUMNS

QUERIES_DIR = Path(__file__).resolve().parents[2] / "queries"
MACROS_FILE = "_macros.sql"
_DEPENDS = re.compile(r"^--\s*depends_on:\s*(.*)$", re.MULTILINE)
_MATERIALIZE = re.compile(r"^--\s*materialize:\s*(\w+)\s*$", re.MULTILINE)
_GETVARIABLE = re.compile(r"getvariable\('(\w+)'\)")
_COMMENT = re.compile(r"--[^\n]*")
KINDS = ("view", "session", "capture")
# variables that only say which rows are in scope: a stored model serves any value of them
SCOPE_VARIABLES = frozenset({"capture_ids", "since_ns", "until_ns"})


@dataclass(frozen=True)
class Model:
    name: str
    path: Path
    sql: str
    depends_on: tuple[str, ...]
    doc: str
    materialize: str = "view"

    # cached: settings_of reads them for every model a query touches, at every definition
    @cached_property
    def code(self) -> str:
        """The SQL without its comments (what it reads is in the code, not the prose)."""
        return _COMMENT.sub("", self.sql)

    @cached_property
    def variables(self) -> frozenset[str]:
        return frozenset(_GETVARIABLE.findall(self.code))

    @cached_property
    def macros_called(self) -> frozenset[str]:
        """The shared macros its code calls."""
        return _macros_called(self.code)


def _parse(path: Path) -> Model:
    text = path.read_text()
    deps: list[str] = []
    for m in _DEPENDS.finditer(text):
        deps += [d.strip() for d in m.group(1).split(",") if d.strip()]
    kind = _MATERIALIZE.search(text)
    materialize = kind.group(1) if kind else "view"
    if materialize not in KINDS:
        raise ValueError(f"queries/{path.name}: materialize must be one of {', '.join(KINDS)}, not {materialize!r}")
    doc_lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        if not (_DEPENDS.match(line) or _MATERIALIZE.match(line)):
            doc_lines.append(line[2:].strip())
    body = text.strip().rstrip(";")
    return Model(path.stem, path, body, tuple(deps), " ".join(doc_lines).strip(), materialize)


@cache
def _catalogue(folder: Path) -> tuple[Model, ...]:
    models = {p.stem: _parse(p) for p in sorted(folder.glob("*.sql")) if not p.name.startswith("_")}
    ordered: list[Model] = []
    seen: set[str] = set()

    def visit(name: str, stack: tuple[str, ...]) -> None:
        if name in seen or name in COLUMNS:
            return
        if name in stack:
            raise ValueError(f"queries: dependency cycle {' -> '.join(stack + (name,))}")
        model = models.get(name)
        if model is None:
            raise ValueError(f"queries: {stack[-1]}.sql depends on unknown view {name!r}")
        for dep in model.depends_on:
            visit(dep, stack + (name,))
        seen.add(name)
        ordered.append(model)

    for name in models:
        visit(name, ())
    return tuple(ordered)


def load_models(folder: Path = QUERIES_DIR) -> list[Model]:
    """All SQL models, in dependency order."""
    return list(_catalogue(folder))


def macros_sql(folder: Path = QUERIES_DIR) -> str:
    path = folder / MACROS_FILE
    return path.read_text() if path.exists() else ""


def closure(models: dict[str, Model], name: str) -> list[Model]:
    """``name`` and every model it reads, directly or not (dependencies first)."""
    out: list[Model] = []
    seen: set[str] = set()

    def visit(n: str) -> None:
        if n in seen or n not in models:
            return
        seen.add(n)
        for dep in models[n].depends_on:
            visit(dep)
        out.append(models[n])

    visit(name)
    return out


_MACRO = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?MACRO\s+(\w+)\s*\((.*?);", re.IGNORECASE | re.DOTALL)


@cache
def macro_variables(folder: Path = QUERIES_DIR) -> dict[str, frozenset[str]]:
    """The variables each shared macro reads."""
    code = _COMMENT.sub("", macros_sql(folder))
    return {m.group(1): frozenset(_GETVARIABLE.findall(m.group(2))) for m in _MACRO.finditer(code)}


def _macros_called(code: str) -> frozenset[str]:
    macros = macro_variables()
    if not macros:
        return frozenset()
    calls = re.compile(rf"\b({'|'.join(map(re.escape, macros))})\s*\(")
    return frozenset(calls.findall(code))


def settings_of(models: dict[str, Model], name: str) -> frozenset[str]:
    """The variables (other than the scope) that ``name``'s answer depends on, read
    directly or through the macros it calls."""
    macros = macro_variables()
    found: set[str] = set()
    for m in closure(models, name):
        found |= m.variables
        for macro in m.macros_called:
            found |= macros[macro]
    return frozenset(found - SCOPE_VARIABLES)


def stored_key(models: dict[str, Model], name: str, defaults: dict[str, object], folder: Path = QUERIES_DIR) -> str:
    """Names what a stored model was computed from: its SQL, the SQL of what it reads,
    the shared macros, the tables' columns and the default settings it used."""
    h = hashlib.sha256()
    h.update(macros_sql(folder).encode())
    for m in closure(models, name):
        h.update(m.name.encode() + b"\0" + m.sql.encode() + b"\0")
        for dep in m.depends_on:
            if dep in COLUMNS:
                h.update(dep.encode() + b"\0" + ",".join(c.name for c in COLUMNS[dep]).encode())
    for var in sorted(settings_of(models, name)):
        h.update(f"{var}={defaults.get(var)!r}".encode())
    return h.hexdigest()[:16]
