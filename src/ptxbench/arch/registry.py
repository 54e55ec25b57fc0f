"""The architecture registry: which hardware features exist on which target, and how to recognise them.

Every feature names the PTX instructions that request it and, per target, the SASS opcodes it lowers
to. The data lives in ``features.toml`` beside this module; each entry names a probe kernel under
``probes/`` and the test suite compiles every probe for every target to prove the mapping, so nothing
here rests on memory.
"""

from __future__ import annotations

import re
from enum import Enum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ptxbench._compat import tomllib

REGISTRY_VERSION = 1


class Arch(str, Enum):
    """Compilation targets. The ``a`` targets are the benchmark's; the plain ones exist to diagnose
    candidates built for the wrong target."""

    SM_90A = "sm_90a"
    SM_100A = "sm_100a"
    SM_90 = "sm_90"
    SM_100 = "sm_100"

    @property
    def gencode(self) -> list[str]:
        """The harness-owned flag; never the ``-arch=sm_90a`` shorthand, which adds a compute_90 pass."""
        number = self.value.removeprefix("sm_")
        return ["-gencode", f"arch=compute_{number},code=sm_{number}"]

    @property
    def is_arch_specific(self) -> bool:
        return self.value.endswith("a")

    @property
    def family(self) -> Literal["hopper", "blackwell"]:
        return "hopper" if self.value.startswith("sm_90") else "blackwell"

    @property
    def specific(self) -> "Arch":
        """The arch-specific target of the same chip (sm_90 -> sm_90a)."""
        return self if self.is_arch_specific else Arch(self.value + "a")


BENCHMARK_ARCHS: tuple[Arch, ...] = (Arch.SM_90A, Arch.SM_100A)


class FeatureCategory(str, Enum):
    MATRIX = "matrix"
    COPY = "copy"
    SYNC = "sync"
    REGISTERS = "registers"
    CLUSTER = "cluster"
    SCHEDULING = "scheduling"
    TENSOR_MEMORY = "tensor_memory"


class MatrixShape(BaseModel):
    """How to read the FLOPs of one executed matrix instruction from its SASS mnemonic.

    ``pattern`` has named groups ``m``, ``n`` and ``k``; ncu counts per warp, so one warpgroup-wide
    instruction is counted ``executions_per_instruction`` times.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    pattern: str
    executions_per_instruction: int = Field(ge=1)

    def flops(self, mnemonic: str) -> int | None:
        """FLOPs (2·m·n·k) of one *counted* execution, or None when the mnemonic carries no shape."""
        match = re.search(self.pattern, mnemonic)
        if not match:
            return None
        m, n, k = (int(match.group(axis)) for axis in ("m", "n", "k"))
        return 2 * m * n * k // self.executions_per_instruction


class Feature(BaseModel):
    """One hardware feature a task can require, with the evidence that shows it at each level."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")
    title: str
    purpose: str
    category: FeatureCategory
    source: list[str] = Field(
        min_length=1,
        description="Substrings whose presence in the source shows the feature was written (inline PTX).",
    )
    ptx: list[str] = Field(min_length=1, description="Regexes over PTX instruction mnemonics.")
    sass: dict[Arch, list[str]] = Field(
        description="Per target that supports the feature: regexes over full SASS mnemonics; "
        "every one must match in the probe's SASS."
    )
    rejected: dict[Arch, str] = Field(
        default_factory=dict,
        description="Targets whose ptxas rejects the feature, with the advice for a candidate that tried.",
    )
    sass_needs_ptx: bool = Field(
        default=False,
        description="The SASS opcodes are not unique to this feature (generic loads, or emitted by ptxas on "
        "its own): SASS evidence counts only where the PTX requests the feature.",
    )
    probe: str = Field(description="File under arch/probes/ that uses the feature and nothing heavier.")
    matrix: MatrixShape | None = None

    @field_validator("ptx")
    @classmethod
    def _ptx_patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            re.compile(pattern)
        return patterns

    @field_validator("sass")
    @classmethod
    def _sass_patterns_compile(cls, by_arch: dict[Arch, list[str]]) -> dict[Arch, list[str]]:
        for patterns in by_arch.values():
            if not patterns:
                raise ValueError("a supported target needs at least one SASS pattern")
            for pattern in patterns:
                re.compile(pattern)
        return by_arch

    @model_validator(mode="after")
    def _supported_and_rejected_are_disjoint(self) -> "Feature":
        both = set(self.sass) & set(self.rejected)
        if both:
            raise ValueError(f"{self.id}: targets both supported and rejected: {sorted(a.value for a in both)}")
        return self

    def supported_on(self, arch: Arch) -> bool:
        return arch in self.sass

    def in_ptx(self, mnemonics: list[str] | set[str]) -> list[str]:
        """The PTX mnemonics that request this feature."""
        return sorted(m for m in mnemonics if any(re.search(p, m) for p in self.ptx))

    def in_sass(self, arch: Arch, mnemonics: list[str] | set[str]) -> list[str]:
        """The SASS mnemonics that show this feature survived compilation for ``arch``.

        A feature counts as present when its first pattern (the defining instruction) matches.
        """
        patterns = self.sass.get(arch)
        if not patterns:
            return []
        return sorted(m for m in mnemonics if re.search(patterns[0], m))

    @property
    def ptx_family(self) -> str:
        """The leading PTX opcode of the feature ('wgmma', 'tcgen05', 'setmaxnreg'), as ptxas names it."""
        match = re.match(r"\^?([a-z0-9_]+)", self.ptx[0])
        return match.group(1) if match else ""

    def in_source(self, text: str) -> bool:
        return any(spelling in text for spelling in self.source)


class Registry(BaseModel):
    """All known features, validated once at load."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: int
    features: list[Feature]

    @model_validator(mode="after")
    def _unique_ids(self) -> "Registry":
        ids = [f.id for f in self.features]
        duplicates = {i for i in ids if ids.count(i) > 1}
        if duplicates:
            raise ValueError(f"duplicate feature ids: {sorted(duplicates)}")
        return self

    def get(self, feature_id: str) -> Feature:
        for feature in self.features:
            if feature.id == feature_id:
                return feature
        known = ", ".join(f.id for f in self.features)
        raise KeyError(f"unknown feature {feature_id!r}; known features: {known}")

    def ids(self) -> list[str]:
        return [f.id for f in self.features]


def probe_path(feature: Feature) -> Path:
    return Path(str(resources.files("ptxbench.arch").joinpath("probes", feature.probe)))


@cache
def load_registry() -> Registry:
    text = resources.files("ptxbench.arch").joinpath("features.toml").read_text()
    data = tomllib.loads(text)
    return Registry(version=data["version"], features=data["feature"])
