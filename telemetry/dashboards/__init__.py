"""Grafana dashboards as code (``grafana``), exported as JSON and provisioning into the
repository's dashboards/ folder and pushed through Grafana's API."""
