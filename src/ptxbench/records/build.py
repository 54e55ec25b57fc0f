"""The record of one build: what the compiler was asked, what it printed, and why a failed build failed.

``toolchain.compile`` makes it (and persists it as ``build.json`` beside the artifacts in the build cache);
``CheckReport`` and ``Evaluation`` carry it. The failure classes (``CompileFailure``) feed the error taxonomy,
the feedback a model gets in refinement, and Fixit; ``toolchain.diagnose`` decides them from the log.

A build's ``version`` is part of its cache key (``toolchain.compile.BuildRequest.key``), so an entry of another
version is never read back as this one: it is built again.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, Field

from ptxbench.arch.registry import Arch
from ptxbench.contract.signature import SOURCE_NAME
from ptxbench.records import Record

COMPILE_RESULT_VERSION = 2  # 2: diagnoses of missing entry points, target hints, user line numbers
_SOURCE_MENTION = re.compile(rf"\b{re.escape(SOURCE_NAME)}\b")


class CompileFailure(str, Enum):
    CPP_ERROR = "cpp_error"
    PTX_SYNTAX = "ptx_syntax"
    PTX_OPERAND = "ptx_operand"
    UNSUPPORTED_ON_TARGET = "unsupported_on_target"
    RESOURCE_LIMIT = "resource_limit"
    LINK_ERROR = "link_error"
    MISSING_ENTRY_POINT = "missing_entry_point"
    TIMEOUT = "timeout"


class Diagnosis(BaseModel):
    failure: CompileFailure
    summary: str
    first_error: str = ""

    @property
    def message(self) -> str:
        """For a one-line verdict that shows nothing else (an eval row): the summary, and where it is
        generic advice, the compiler's first error, which says what to fix."""
        if self.failure not in _GENERIC or not self.first_error:
            return self.summary
        return f"{self.summary} First error: {self.first_error}"


# Classes whose summary is advice that does not say where the error is.
_GENERIC = frozenset({CompileFailure.CPP_ERROR, CompileFailure.PTX_SYNTAX, CompileFailure.PTX_OPERAND,
                      CompileFailure.RESOURCE_LIMIT, CompileFailure.LINK_ERROR})


class BuildResult(Record):
    """The outcome of one build; persisted as ``build.json`` beside its artifacts."""

    version: int = COMPILE_RESULT_VERSION
    ok: bool
    arch: Arch
    key: str
    command: list[str]
    log: str = Field(description="Everything nvcc, ptxas and the linker printed.")
    duration_s: float
    diagnosis: Diagnosis | None = None
    directory: str
    cached: bool = False

    def artifact(self, suffix: str) -> Path | None:
        """The kept artifact ending in ``suffix`` ('.so', '.ptx', '.cubin'), if the build made it."""
        path = Path(self.directory) / f"candidate{suffix}"
        return path if path.is_file() else None

    def named(self, name: str) -> "BuildResult":
        """This result with the compiler's messages naming ``name`` (the user's file) instead of
        ``candidate.cu``; the cached result itself stays independent of any file name."""
        rename = lambda text: _SOURCE_MENTION.sub(lambda _: name, text)  # noqa: E731
        diagnosis = self.diagnosis
        if diagnosis is not None:
            diagnosis = diagnosis.model_copy(update={"summary": rename(diagnosis.summary),
                                                     "first_error": rename(diagnosis.first_error)})
        return self.model_copy(update={"log": rename(self.log), "diagnosis": diagnosis})
