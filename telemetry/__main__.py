"""python -m telemetry ... (the same as `tailtap ...`)."""

from telemetry.main import main

main()
