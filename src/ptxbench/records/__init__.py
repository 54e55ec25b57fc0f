"""Every record ptxbench persists, below every producer and consumer of them, and their common base.

``build`` (one build's outcome and diagnosis), ``evaluation`` (one candidate's verdict and evidence),
``check`` (a build and its static report), ``completion`` (what a model answered, and the candidate found
in it), ``trajectory`` (a sample's turns and feedback), ``rundir`` (the run directory: header, results,
``load_result``), and ``version`` (the version every persisted record carries, checked on read, with its
migrations). This module is ``Record``, the base of them all and of the records sent between processes.

A candidate's output can hold NaN and infinities (an output left unwritten keeps its NaN prefill), and
so can the numbers measured from it: errors, ratios, worst values. Pydantic writes non-finite floats as
``null`` by default, which a ``float`` field then refuses on reading, so a single partly written output
made its whole result unreadable. Records write them as the tokens ``NaN``, ``Infinity`` and
``-Infinity`` instead, which pydantic's JSON parser and Python's ``json.loads`` both read back exactly.

The setting applies to the fields a model declares itself (nested models use their own), so every model
that holds a float, directly or in a container, derives from ``Record``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """A pydantic model whose non-finite floats survive a JSON round trip."""

    model_config = ConfigDict(ser_json_inf_nan="constants")
