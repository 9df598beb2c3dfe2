"""Command-line values of the `tailtap` verbs, parsed without typer.

Both the typer app (telemetry/cli.py) and the fast `analyze` path (telemetry/main.py) use
these, so a value means the same on both. Errors are :class:`BadValue`; the typer app
reports them as usage errors (exit 2).
"""

from __future__ import annotations

from enum import StrEnum


class BadValue(ValueError):
    """A command-line value that cannot be used; the message says why and gives examples."""


class Format(StrEnum):
    table = "table"
    json = "json"
    markdown = "markdown"


class SqlFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


class CaptureSide(StrEnum):
    auto = "auto"
    server = "server"
    client = "client"


_UNITS_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "us": 0.001}


def parse_duration_ms(text: str) -> float:
    """'300ms', '2s', '1.5m', '250' (ms) -> milliseconds."""
    t = text.strip().lower()
    for unit in ("ms", "us", "s", "m"):
        if t.endswith(unit):
            number, factor = t[: -len(unit)], _UNITS_MS[unit]
            break
    else:
        number, factor = t, 1.0
    try:
        value = float(number) * factor
    except ValueError:
        raise BadValue(f"{text!r} is not a duration (examples: 300ms, 2s, 1m)") from None
    if value <= 0:
        raise BadValue(f"{text!r} must be positive")
    return value


def parse_slo(text: str | None) -> dict[str, float]:
    """'ttft=300ms,latency=2s,gap=100ms' -> {'slo_ttft_ms': 300.0, ...}."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, _, value = part.partition("=")
        name = name.strip().lower()
        if name not in ("ttft", "latency", "gap") or not value:
            raise BadValue(f"{part!r}: use ttft=DURATION, latency=DURATION or gap=DURATION")
        out[f"slo_{name}_ms"] = parse_duration_ms(value)
    return out


def parse_time_ns(text: str | None) -> int | None:
    """ISO-8601 (UTC if no zone) or epoch seconds -> ns."""
    if text is None:
        return None
    import datetime as dt

    try:
        return int(float(text) * 1e9)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadValue(f"{text!r} is not a time (ISO-8601 like 2026-11-22T10:32:00Z, or epoch seconds)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1e9)
