"""Every name the server takes from the evaluator, in one place: where ``evaluate/`` moves a module, this file
is the one to follow it."""

from __future__ import annotations

from ptxbench.evaluate.evaluator import DEFAULT_LANES, HANDLER, EvalOptions
from ptxbench.evaluate.fleet.engine import Engine, Submission
from ptxbench.evaluate.fleet.run import Candidate, Resumption, evaluate_elsewhere

__all__ = ["DEFAULT_LANES", "HANDLER", "Candidate", "Engine", "EvalOptions", "Resumption", "Submission",
           "evaluate_elsewhere"]
