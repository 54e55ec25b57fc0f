"""The FlashInfer-Trace records PTXBench reads, as the subset of their schema it needs.

A *definition* names an operator (``op_type``), its axes (``const`` with a value, or ``var`` bound by each
workload), its input and output tensors (a shape of axis names, ``null`` for a Python scalar; a dtype) and a
PyTorch reference: a top-level ``run(inputs...)`` returning the outputs. A *workload* (one JSON object per
line of a ``.jsonl``, stored as a trace whose ``solution`` and ``evaluation`` are null) binds the var axes and
says where each input comes from: ``random``, a ``scalar`` value, or a tensor in a ``safetensors`` file
(``path`` relative to the dataset root, ``tensor_key`` inside it). A *solution* is only counted here.

Written here so importing needs no ``flashinfer-bench`` package; fields PTXBench does not read are allowed
and ignored, and a record that does not match is refused in one line naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ptxbench.errors import TaskError


class ImportProblem(TaskError):
    """A definition or workload that cannot become a PTXBench task; the message says which field and why."""


class _Schema(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class AxisConst(_Schema):
    type: Literal["const"]
    value: int = Field(ge=0)
    description: str | None = None


class AxisVar(_Schema):
    type: Literal["var"]
    description: str | None = None


class TensorSpec(_Schema):
    shape: list[str] | None
    dtype: str
    description: str | None = None
    optional: bool = False


class Definition(_Schema):
    name: str = Field(min_length=1)
    op_type: str = Field(min_length=1)
    axes: dict[str, Annotated[Union[AxisConst, AxisVar], Field(discriminator="type")]] = Field(min_length=1)
    inputs: dict[str, TensorSpec] = Field(min_length=1)
    outputs: dict[str, TensorSpec] = Field(min_length=1)
    reference: str = Field(min_length=1)
    tags: list[str] = Field(default_factory=list)
    description: str | None = None
    constraints: list[str] = Field(default_factory=list)

    def tag(self, namespace: str) -> list[str]:
        """The values of the tags ``namespace:value`` (spaces after the colon allowed)."""
        found = []
        for tag in self.tags:
            key, sep, value = tag.partition(":")
            if sep and key.strip() == namespace:
                found.append(value.strip())
        return found


class InputSpec(_Schema):
    type: Literal["random", "scalar", "safetensors"]
    value: int | float | bool | None = None
    path: str | None = None
    tensor_key: str | None = None


class WorkloadSpec(_Schema):
    axes: dict[str, int]
    inputs: dict[str, InputSpec] = Field(default_factory=dict)
    uuid: str = Field(min_length=1, description="Given by the trace; where it lacks one (some stored MLA traces "
                      "do), the file's name and line stand in.")


class WorkloadTrace(_Schema):
    definition: str
    workload: WorkloadSpec


class SolutionSpec(_Schema):
    name: str = Field(min_length=1)
    definition: str = Field(min_length=1)
    author: str | None = None


# -------------------------------------------------------------------------------------------- reading


def _one_line(error: ValidationError, where: str) -> str:
    first = error.errors()[0]
    location = ".".join(str(p) for p in first["loc"]) or "(top level)"
    return f"{where}: {location}: {first['msg']}"


def _json_file(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ImportProblem(f"cannot read {path}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ImportProblem(f"{path}: not JSON: {getattr(exc, 'msg', exc)} (line {getattr(exc, 'lineno', 1)})") from None


def read_definition(path: Path) -> Definition:
    try:
        return Definition.model_validate(_json_file(path))
    except ValidationError as exc:
        raise ImportProblem(_one_line(exc, str(path))) from None


def read_solution(path: Path) -> SolutionSpec:
    try:
        return SolutionSpec.model_validate(_json_file(path))
    except ValidationError as exc:
        raise ImportProblem(_one_line(exc, str(path))) from None


def read_workloads(path: Path, definition: str | None = None) -> list[WorkloadTrace]:
    """The workload traces of a JSONL file (only those of ``definition`` when it is given)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ImportProblem(f"cannot read {path}: {exc.strerror}") from None
    found = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            workload = data.get("workload") if isinstance(data, dict) else None
            if isinstance(workload, dict) and "uuid" not in workload:
                workload["uuid"] = f"{path.stem}-line{number}"
            trace = WorkloadTrace.model_validate(data)
        except json.JSONDecodeError as exc:
            raise ImportProblem(f"{path}:{number}: not JSON: {exc.msg}") from None
        except ValidationError as exc:
            raise ImportProblem(_one_line(exc, f"{path}:{number}")) from None
        if definition is None or trace.definition == definition:
            found.append(trace)
    return found
