"""Command-line options more than one command takes: where InfluxDB is."""

from __future__ import annotations

import argparse

from analyzer.store import InfluxClient, InfluxSettings


def add_influx_options(parser: argparse.ArgumentParser) -> None:
    """--influx-url, --database, --username, --password-env (defaults: ``InfluxSettings``)."""
    defaults = InfluxSettings()
    parser.add_argument("--influx-url", default=defaults.url,
                        help=f"InfluxDB HTTP API (default {defaults.url})")
    parser.add_argument("--database", default=defaults.database,
                        help=f"database (default {defaults.database})")
    parser.add_argument("--username", default="", help="InfluxDB 1.x user name (default none)")
    parser.add_argument("--password-env", default=defaults.password_env,
                        help="environment variable holding the password or token "
                             f"(default {defaults.password_env})")


def influx_client(args: argparse.Namespace) -> InfluxClient:
    """The InfluxDB client that :func:`add_influx_options`' options name."""
    return InfluxClient(InfluxSettings(url=args.influx_url, database=args.database,
                                       username=args.username, password_env=args.password_env))
