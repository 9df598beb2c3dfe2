#!/usr/bin/env bash
# Re-creates every sample with the lab (needs root, ip netns, tcpdump). About 5 minutes.
# The numbers in README.md come from `python -m telemetry.lab.summary samples/*/`.
set -euo pipefail
cd "$(dirname "$0")/.."
TAILTAP=${TAILTAP:-.venv/bin/tailtap}
for s in ${SCENARIOS:-baseline loss_burst reorder queueing throttle_shaper throttle_policer flow_control \
         server_stall mixed server_slow_read resource_exhausted}; do
  "$TAILTAP" lab run "$s" --out "samples/$s" --seed 1
done
