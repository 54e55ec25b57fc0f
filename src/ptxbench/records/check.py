"""The record of ``ptxbench check``: a candidate's build for one target and what its binary contains."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ptxbench.arch.registry import Arch
from ptxbench.records.build import BuildResult
from ptxbench.records.version import Versioned
from ptxbench.static.report import StaticReport

CHECK_REPORT_VERSION = 1


class CheckReport(Versioned):
    """A candidate's build and static report for one target (made by ``ptxbench.check``)."""

    RECORD = "check report"

    version: int = CHECK_REPORT_VERSION
    kind: Literal["check"] = Field(default="check", description=(
        "What record this is, beside an Evaluation (``kind`` 'evaluation') where either can stand"))
    candidate: str
    source_sha256: str
    arch: Arch
    task: str | None
    build: BuildResult
    static: StaticReport | None
    duration_s: float

    @property
    def ok(self) -> bool:
        """Built, and (with a task) every requirement reached the SASS, with no policy violation."""
        if not self.build.ok or self.static is None:
            return False
        return self.static.requirements_in_sass and not self.static.policy_violations
