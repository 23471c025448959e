"""Grafana provisioning and dashboards for Barkwatch (see README.md here)."""
