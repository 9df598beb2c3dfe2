"""``tailtap lab``: run impairment-lab scenarios and list them.

Mount with ``app.add_typer(lab_app, name="lab")``; standalone:
``python -m telemetry.lab.cli run loss_burst --out out/loss_burst``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from telemetry.lab import scenarios as sc

lab_app = typer.Typer(
    help="Impairment lab: labelled captures of LLM-like gRPC traffic (needs root).",
    no_args_is_help=True,
)


@lab_app.command("list")
def list_scenarios() -> None:
    """List the scenarios and what each injects."""
    from rich.console import Console
    from rich.table import Table

    t = Table("scenario", "duration", "windows (fraction of the run)", "description")
    for s in sc.SCENARIOS.values():
        ws = ", ".join(f"{w.name} [{w.cause}] {w.start:.0%}-{w.end:.0%}" for w in s.windows)
        t.add_row(s.name, f"{s.duration_s:g} s", ws or "-", s.description)
    Console().print(t)


@lab_app.command("run")
def run(
    scenario: Annotated[str, typer.Argument(help="Scenario name (see `tailtap lab list`).")],
    out: Annotated[Path, typer.Option("--out", help="Output directory.")],
    duration: Annotated[float | None, typer.Option(help="Load duration in seconds.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of arrivals, sizes and impairment draws.")] = 1,
    rate: Annotated[float | None, typer.Option(help="Requests per second (default 12).")] = None,
    keep_work: Annotated[
        bool, typer.Option(help="Keep configs, logs and raw reports in OUT/work.")
    ] = False,
    client_capture: Annotated[
        bool, typer.Option(help="Also capture at the client's veth (OUT/capture_client.pcap).")
    ] = False,
    protocol: Annotated[
        str, typer.Option(help="The LLM service's protocol: grpc (grpcio), openai-http1 (an OpenAI-compatible "
                               "SSE server on uvicorn) or openai-h2c (the same on hypercorn, HTTP/2 cleartext).")
    ] = "grpc",
    tls: Annotated[
        bool, typer.Option("--tls", help="Serve over TLS (self-signed; the client writes OUT/keys.txt, for `tailtap "
                                         "analyze --keylog`; gRPC is then called by httpx, which can write one).")
    ] = False,
) -> None:
    """Run SCENARIO in three network namespaces and write capture.pcap, labels.json,
    client.parquet and bridge_events.parquet to OUT."""
    from telemetry.lab.runner import missing_requirements, run_scenario

    if scenario not in sc.SCENARIOS:
        typer.echo(f"unknown scenario {scenario!r}; known: {', '.join(sc.SCENARIOS)}", err=True)
        raise typer.Exit(2)
    missing = missing_requirements(protocol, tls)
    if missing:
        typer.echo("tailtap lab needs " + ", ".join(missing), err=True)
        raise typer.Exit(2)
    from telemetry.lab.openai_server import PROTOCOLS

    if protocol not in PROTOCOLS:
        typer.echo(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}", err=True)
        raise typer.Exit(2)
    if client_capture:
        keep_work = True
    run_scenario(scenario, out, duration=duration, seed=seed, rate=rate, keep_work=keep_work,
                 client_capture=client_capture, log=typer.echo, protocol=protocol, tls=tls)  # fmt: skip
    typer.echo(f"wrote {out}/capture.pcap, labels.json, client.parquet, bridge_events.parquet" + (", keys.txt" if tls else ""))


def _check_split(split: str | None) -> None:
    """--split names one of the sweep's two splits (exit 2 otherwise)."""
    if split not in (None, "tuning", "heldout"):
        typer.echo(f"--split must be tuning or heldout, not {split}", err=True)
        raise typer.Exit(2)


@lab_app.command("sweep")
def sweep(
    out: Annotated[Path, typer.Option("--out", help="Folder of the runs (one sub-folder each; resumable).")],
    seed: Annotated[int, typer.Option(help="Seed of the sweep: run i's parameters are drawn from (seed, i).")] = 1,
    runs: Annotated[int, typer.Option(help="How many runs.")] = 80,
    start: Annotated[int, typer.Option(help="Index of the first run.")] = 0,
    ranges: Annotated[int, typer.Option(help="Which ranges to draw from: 1 (the first sweep's) or 2 (wider: cross traffic, uplink variants, zero window, two windows).")] = 1,
    realtime: Annotated[bool, typer.Option(help="Run the lab's server, client and tcpdump under chrt -r 10 like its bridge.")] = True,
    split: Annotated[str | None, typer.Option(help="Run only the runs of this split (heldout: a fresh judge of settings already fixed; the other split's indices are skipped, not run).")] = None,
) -> None:
    """Run a randomized sweep: each run's path (RTT floor, link rate), load (unary and
    streaming mix, concurrency), capture point (server or client) and impairment (cause,
    magnitudes, a 3-60 s window in a 30 s-10 min run) drawn from ranges, each run assigned
    to the tuning or the held-out split before any scoring (telemetry/lab/sweep.py)."""
    from telemetry.lab.runner import missing_requirements
    from telemetry.lab.sweep import run_sweep

    missing = missing_requirements()
    if missing:
        typer.echo("tailtap lab needs " + ", ".join(missing), err=True)
        raise typer.Exit(2)
    if ranges not in (1, 2):
        typer.echo(f"--ranges must be 1 or 2, not {ranges}", err=True)
        raise typer.Exit(2)
    _check_split(split)
    metas = run_sweep(seed, runs, out, start, log=typer.echo, ranges=ranges, realtime=realtime, split=split)
    counts: dict[str, int] = {}
    for m in metas:
        counts[m["status"]] = counts.get(m["status"], 0) + 1
    typer.echo(f"{len(metas)} runs in {out}: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


@lab_app.command("sweep-report")
def sweep_report(
    folders: Annotated[list[Path], typer.Argument(help="The sweep's folders (`tailtap lab sweep --out`; several: their runs together).")],
    readme: Annotated[Path | None, typer.Option(help="Write the tables into this Markdown file, between its sweep markers.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write every run's scores (with every miss) here.")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="Write one row per run (parameters, scores) here.")] = None,
    diagnosis: Annotated[Path | None, typer.Option(help="Write where the attribution fails (tuning runs) here, as Markdown.")] = None,
    stores: Annotated[Path | None, typer.Option(help="Keep each run's store in STORES/<run> (default: in the run's folder).")] = None,
    reingest: Annotated[bool, typer.Option(help="Ingest every capture again (otherwise only when the parsers changed).")] = False,
    only: Annotated[list[str] | None, typer.Option(help="Score only this run (repeatable), e.g. sweep-1-004.")] = None,
    split: Annotated[str | None, typer.Option(help="Score only the runs of this split (tuning while choosing settings).")] = None,
    settings: Annotated[list[str] | None, typer.Option("--set", help="Score with a setting other than its default, e.g. --set calm_factor=1.6 (repeatable; not with --readme).")] = None,
) -> None:
    """Score every run of a sweep (ingest once, then the attribution as `tailtap sql` reads
    it with the default settings and as `tailtap analyze`'s report reads it) against the
    client's own timings, and print the confusion matrices and the per-run table, split by
    tuning and held-out runs. After a change of queries/ this only runs the SQL again."""
    import json

    from telemetry.lab.sweep_score import report
    from telemetry.models.db import DEFAULT_PARAMS

    params = {}
    for item in settings or []:
        name, sep, value = item.partition("=")
        if not sep or name not in DEFAULT_PARAMS:
            typer.echo(f"--set {item}: expected NAME=VALUE with NAME one of {', '.join(DEFAULT_PARAMS)}", err=True)
            raise typer.Exit(2)
        try:
            params[name] = json.loads(value)
        except ValueError:
            params[name] = value
    if params and readme:
        typer.echo("--readme takes the default settings' scores only (drop --set)", err=True)
        raise typer.Exit(2)
    _check_split(split)
    for folder in folders:
        if not folder.is_dir():
            typer.echo(f"{folder}: no such folder (run `tailtap lab sweep --out {folder}` first)", err=True)
            raise typer.Exit(2)
    typer.echo(report(folders, readme, json_out, log=lambda m: typer.echo(m, err=True), reingest=reingest,
                      stores=stores, csv_out=csv_out, diagnosis_out=diagnosis, only=only, split=split,
                      params=params or None))


@lab_app.command("cleanup")
def cleanup() -> None:
    """Delete lab namespaces left behind by runs whose runner is gone."""
    from telemetry.lab.netns import cleanup_stale

    removed = cleanup_stale()
    typer.echo("removed: " + (", ".join(removed) if removed else "nothing"))


if __name__ == "__main__":
    lab_app()
