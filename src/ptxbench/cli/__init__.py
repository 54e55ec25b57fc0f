"""The ``ptxbench`` command line: a thin layer over the Python API (``app`` assembles the commands; each
command or group has its module; ``options`` declares the option types several commands share)."""

from __future__ import annotations

from ptxbench.cli.app import app, main

__all__ = ["app", "main"]
