"""python -m telemetry.cli ... (the same as `tailtap ...`)."""

from telemetry.cli.main import entry

entry()
