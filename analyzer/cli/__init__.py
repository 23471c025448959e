"""The ``barkwatch`` command line: one module per command group, wired in :mod:`.main`."""

from analyzer.cli.main import main

__all__ = ["main"]
