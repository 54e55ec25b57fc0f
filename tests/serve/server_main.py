"""Starts the real server (``ptxbench.serve.server.serve``, uvicorn) for the tests, with the GPU side's CPU
stand-in: ``python -m tests.serve.server_main CONFIG_JSON`` (a ``ServeConfig``). Exits as ``ptxbench serve``
does: 128 + the signal that stopped it."""

import sys

from ptxbench.serve.server import ServeConfig, serve

if __name__ == "__main__":  # the GPU hosts are started with spawn, which imports this module again
    stopped_by = serve(ServeConfig.model_validate_json(sys.argv[1]))
    sys.exit(0 if stopped_by is None else 128 + stopped_by)
