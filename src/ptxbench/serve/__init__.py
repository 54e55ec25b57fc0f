"""``ptxbench serve``: the evaluator as a long-lived HTTP service.

``models`` (the API's records), ``store`` (the durable SQLite job queue), ``service`` (jobs from the store to
one long-lived evaluation ``Engine``, and their stage results back), ``app`` (the HTTP API: FastAPI), and
``server`` (configuration, the access-token policy, uvicorn). ``evaluation`` names everything taken from
``evaluate/``. The HTTP stack is the optional extra ``serve``; importing it is deferred to ``server``/``app``.
"""
