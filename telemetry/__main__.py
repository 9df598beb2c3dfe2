"""python -m telemetry ... (the same as `tailtap ...`)."""

from telemetry.cli.main import entry

entry()
