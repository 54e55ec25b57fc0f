"""Errors a user can act on. Each message says what is wrong and, where there is one, the fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class PtxbenchError(Exception):
    """Base for errors shown to the user as one clear line (the CLI prints them without a traceback)."""


class ToolchainMissing(PtxbenchError):
    """A CUDA tool (nvcc, ptxas, cuobjdump, nvdisasm, ncu) could not be found."""


class TaskError(PtxbenchError):
    """A task file is malformed or a task id is unknown."""


class CandidateError(PtxbenchError):
    """A candidate file cannot be read or is not a CUDA source."""


class UnreadableCandidate(CandidateError):
    """A candidate file whose content holds no candidate: ``empty`` (nothing but white space) or not (not text,
    or not readable). Where one of many files is so, it is that file's failed item, not the whole command's."""

    def __init__(self, message: str, *, empty: bool = False) -> None:
        super().__init__(message)
        self.empty = empty


class ProviderError(PtxbenchError):
    """An LLM provider cannot be set up or used: bad 'provider:name' spec, bad options, unreadable replay file."""


class UnknownProvider(ProviderError):
    """The 'provider' part of a model spec names no registered provider."""


class ProviderSdkMissing(ProviderError):
    """The SDK a provider needs is not installed; the message names the extra that installs it."""


class ApiKeyMissing(ProviderError):
    """A hosted provider has no API key; the message names the environment variable to set."""


class OptionError(PtxbenchError, ValueError):
    """An option's value is malformed or cannot be used (``--one-shot`` without ``TASK:FILE``); the message
    gives the expected form."""


def field_problems(error: ValidationError) -> str:
    """What is wrong with a record, naming each field ("missing field 'completion'"), not pydantic's bare
    "Field required"."""
    problems = []
    for problem in error.errors():
        field = ".".join(str(part) for part in problem["loc"])
        if not field:
            problems.append(problem["msg"])
        elif problem["type"] == "missing":
            problems.append(f"missing field {field!r}")
        else:
            problems.append(f"field {field!r}: {problem['msg']}")
    return "; ".join(problems)
