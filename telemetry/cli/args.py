"""Command-line values of the `tailtap` verbs, parsed without typer.

Both the typer app (telemetry/cli/app.py) and the fast paths (telemetry/cli/main.py) use
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


REPORT_TOP = 10  # slowest requests the report lists unless told


def window_params(window: str | None = None, slo: str | None = None) -> dict[str, object]:
    """The models' window and SLO parameters from a verb's --window and --slo."""
    return {"window_s": parse_duration_ms(window) / 1000.0 if window else None, **parse_slo(slo)}


def report_params(window: str | None = None, slo: str | None = None, since: str | None = None,
                  until: str | None = None, top: int = REPORT_TOP) -> dict[str, object]:
    """The report's model parameters from its options (both command paths build them so)."""
    return {**window_params(window, slo), "since_ns": parse_time_ns(since), "until_ns": parse_time_ns(until),
            "slowest_n": top}


def parse_period(text: str, day_ns: int | None) -> tuple[int | None, int | None, str | None]:
    """A compared period: ``T1..T2`` (either end may be left open; each an ISO-8601 time,
    epoch seconds, or a time of day HH:MM[:SS] on ``day_ns``'s UTC date) -> (since_ns,
    until_ns, None), or a capture id (or its first characters) -> (None, None, id)."""
    import datetime as dt

    text = text.strip()
    if ".." not in text:
        if not text or any(c not in "0123456789abcdef" for c in text.lower()):
            raise BadValue(f"{text!r} is neither T1..T2 (e.g. 10:00..11:00) nor a capture id")
        return None, None, text.lower()

    def one(part: str) -> int | None:
        part = part.strip()
        if not part:
            return None
        if day_ns is not None and len(part) <= 8 and part.count(":") in (1, 2) and "T" not in part:
            try:
                t = dt.time.fromisoformat(part)
            except ValueError:
                raise BadValue(f"{part!r} is not a time of day (HH:MM or HH:MM:SS)") from None
            day = dt.datetime.fromtimestamp(day_ns / 1e9, dt.UTC).date()
            return int(dt.datetime.combine(day, t, dt.UTC).timestamp() * 1e9)
        return parse_time_ns(part)

    a, _, b = text.partition("..")
    since, until = one(a), one(b)
    if since is not None and until is not None and until <= since:
        raise BadValue(f"{text!r}: the period ends before it starts")
    return since, until, None
