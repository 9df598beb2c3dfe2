"""python -m telemetry.daemon run ... (the same as `tailtap daemon run ...`)."""

from telemetry.daemon.cli import daemon_app

daemon_app(prog_name="tailtap daemon")
