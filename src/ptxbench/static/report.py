"""The static half of the instruction check: from a successful build to per-feature evidence.

For each feature the funnel is *written* (source) → *requested* (PTX) → *compiled* (SASS). Whether it
also *executed* and did the bulk of the work is the GPU evaluator's question; this report says only
what the binary contains, and names the stage where a requested feature was lost. It reads text the
toolchain produced (``check.py`` runs the tools), and runs nothing itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field, model_validator

from ptxbench.arch.registry import Arch, Feature, FeatureCategory, load_registry
from ptxbench.static import ptx as ptx_parser
from ptxbench.static import sass as sass_parser
from ptxbench.static.elf import needed_libraries
from ptxbench.static.ptxas_log import KernelResources, PtxasWarning, resources, warnings
from ptxbench.tasks.model import Requirement, Task

STATIC_REPORT_VERSION = 2
"""2: a requirement's ``stage`` reads ``absent | source | ptx | sass`` (or ``unsupported``), the words of the CLI,
the serving API's events and the report; version 1 wrote ``not_written``, ``eliminated_before_ptx``,
``not_in_sass``, ``in_sass`` and ``unsupported_on_target``, which ``_static_from_v1`` rewrites on read."""

_BANNED_SOURCE = re.compile(
    r"#\s*include\s*[<\"]\s*(cublas\w*|cudnn\w*|cutlass/[^>\"]*|cute/[^>\"]*|cublasLt\w*)[^>\"]*[>\"]"
    r"|\b(cublas\w*|cudnn\w*)\s*\(|\bdlopen\s*\(")
_BANNED_LIBRARY = re.compile(r"lib(cublas|cublasLt|cudnn)\w*\.so")


class Stage(str, Enum):
    """How far a required feature got, in the funnel's order; the value is the one word every output uses for it
    (``check`` and ``eval`` in the terminal, JSON, the serving API's events, the report's candidates).

    ``absent``: not in the source; ``source``: written, gone before the PTX; ``ptx``: requested in the PTX, gone
    from the SASS; ``sass``: in the binary. ``unsupported`` is no stage reached but the target's answer: it has no
    such instruction (wgmma on sm_100a), whatever the source wrote.
    """

    NOT_WRITTEN = "absent"
    ELIMINATED_BEFORE_PTX = "source"
    NOT_IN_SASS = "ptx"
    UNSUPPORTED_ON_TARGET = "unsupported"
    IN_SASS = "sass"


LEGACY_STAGES = {"not_written": Stage.NOT_WRITTEN, "eliminated_before_ptx": Stage.ELIMINATED_BEFORE_PTX,
                 "not_in_sass": Stage.NOT_IN_SASS, "unsupported_on_target": Stage.UNSUPPORTED_ON_TARGET,
                 "in_sass": Stage.IN_SASS}
"""The words static reports of version 1 (and the serving API's events made from them) used for each stage."""


def current_stage(word: Any) -> Any:
    """A stage word as today's vocabulary spells it: an old word rewritten, anything else left for validation."""
    return LEGACY_STAGES[word].value if isinstance(word, str) and word in LEGACY_STAGES else word


def _static_from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 spelled the stages in the old words (``LEGACY_STAGES``): rewritten, nothing else changed."""
    requirements = data.get("requirements")
    if isinstance(requirements, list):
        data["requirements"] = [{**r, "stage": current_stage(r.get("stage"))} if isinstance(r, dict) else r
                                for r in requirements]
    return data


class FeatureEvidence(BaseModel):
    feature: str
    in_source: bool
    ptx: dict[str, int] = Field(default_factory=dict, description="PTX mnemonic -> static count")
    sass: dict[str, dict[str, int]] = Field(default_factory=dict, description="kernel -> SASS mnemonic -> static count")

    @property
    def in_ptx(self) -> bool:
        return bool(self.ptx)

    @property
    def in_sass(self) -> bool:
        return any(self.sass.values())


class RequirementCheck(BaseModel):
    """One task requirement, judged on the binary. ``stage`` is the furthest any alternative reached."""

    requirement: Requirement
    stage: Stage
    message: str
    evidence: list[FeatureEvidence]

    @property
    def in_sass(self) -> bool:
        return self.stage is Stage.IN_SASS


class KernelReport(BaseModel):
    name: str
    demangled: str
    sass: dict[str, int] = Field(description="full SASS mnemonic -> static count")
    resources: KernelResources = Field(default_factory=KernelResources)
    features: list[str] = Field(default_factory=list, description="registry features whose defining instruction is here")


class StaticReport(BaseModel):
    """What the compiled candidate contains, for one target."""

    version: int = STATIC_REPORT_VERSION
    arch: Arch
    task: str | None = None
    task_hash: str | None = None
    ptx: dict[str, int] = Field(description="PTX mnemonic -> static count, whole module")
    kernels: list[KernelReport]
    warnings: list[PtxasWarning]
    features: list[FeatureEvidence] = Field(description="every registry feature with any evidence")
    requirements: list[RequirementCheck] = Field(default_factory=list)
    policy_violations: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _read_version(cls, data: Any) -> Any:
        """Bring a stored report of an older version up to date; refuse one of a newer version. (The records
        that hold a static report check their own versions too; static/ sits below records/ and cannot use
        their ``Versioned``, so this is its own small copy of the rule.)"""
        if not isinstance(data, dict) or "version" not in data:
            return data
        version = data["version"]
        if version == STATIC_REPORT_VERSION:
            return data
        if version == 1:
            return {**_static_from_v1(dict(data)), "version": STATIC_REPORT_VERSION}
        raise ValueError(f"static report version {version!r} is not one this ptxbench reads "
                         f"(1 or {STATIC_REPORT_VERSION}); a newer ptxbench wrote it: upgrade ptxbench to read it")

    @property
    def requirements_in_sass(self) -> bool:
        return all(r.in_sass for r in self.requirements)


def evidence_for(feature: Feature, arch: Arch, source: str, ptx_hist: dict[str, int],
                 kernels: dict[str, dict[str, int]]) -> FeatureEvidence:
    ptx_hits = {m: ptx_hist[m] for m in feature.in_ptx(set(ptx_hist))}
    sass_hits = {}
    for kernel, histogram in kernels.items() if ptx_hits or not feature.sass_needs_ptx else ():
        hits = {m: histogram[m] for m in feature.in_sass(arch, set(histogram))}
        if hits:
            sass_hits[kernel] = hits
    return FeatureEvidence(feature=feature.id, in_source=feature.in_source(source), ptx=ptx_hits, sass=sass_hits)


def judge(requirement: Requirement, arch: Arch, evidence: list[FeatureEvidence],
          all_evidence: list[FeatureEvidence]) -> RequirementCheck:
    registry = load_registry()
    label = requirement.label
    if any(e.in_sass for e in evidence):
        stage, message = Stage.IN_SASS, f"{label}: in the SASS (execution is checked on the GPU)"
    elif not any(registry.get(f).supported_on(arch) for f in requirement.any_of):
        stage = Stage.UNSUPPORTED_ON_TARGET
        advice = sorted({registry.get(f).rejected.get(arch, "") for f in requirement.any_of} - {""})
        message = f"{label}: not available on {arch.value}" + (f" ({' '.join(advice)})" if advice else "")
        if any(e.in_source for e in evidence):
            message += ("; the source writes it but it compiled away, so this build does none of that work "
                        "(a body guarded by `#if __CUDA_ARCH_FEAT_SM90_ALL` is empty on a plain target)")
    elif any(e.in_ptx for e in evidence):
        stage = Stage.NOT_IN_SASS
        message = (f"{label}: requested in the PTX but absent from the SASS for {arch.value}: ptxas removed it "
                   "(unreachable, or its result never used)")
    elif any(e.in_source for e in evidence):
        stage = Stage.ELIMINATED_BEFORE_PTX
        message = (f"{label}: written in the source but absent from the PTX: eliminated before code generation "
                   f"(dead code, or inside a preprocessor branch that is false for {arch.value}, such as "
                   "`#if __CUDA_ARCH_FEAT_SM90_ALL` on a plain target)")
    else:
        stage, message = Stage.NOT_WRITTEN, f"{label}: not used (absent from the source, the PTX and the SASS)"
    if stage is not Stage.IN_SASS:
        message += _other_matrix_path(requirement, all_evidence)
    return RequirementCheck(requirement=requirement, stage=stage, message=message, evidence=evidence)


def _other_matrix_path(requirement: Requirement, all_evidence: list[FeatureEvidence]) -> str:
    """When a matrix feature is missing, name the matrix path the kernel does use."""
    registry = load_registry()
    if not all(registry.get(f).category is FeatureCategory.MATRIX for f in requirement.any_of):
        return ""
    used = [e.feature for e in all_evidence
            if e.in_sass and registry.get(e.feature).category is FeatureCategory.MATRIX and e.feature not in requirement.any_of]
    if not used:
        return "; no tensor-core instruction is in the SASS (the matrix work runs on the FMA pipes)"
    return f"; the SASS does use {', '.join(used)} instead"


def policy_violations(source: str, shared_object: bytes | None) -> list[str]:
    found = [f"source references a forbidden library or loader: {m.group(0).strip()}"
             for m in _BANNED_SOURCE.finditer(source)]
    if shared_object is not None:
        found += [f"the shared object links {lib}" for lib in needed_libraries(shared_object)
                  if _BANNED_LIBRARY.search(lib)]
    return found


def static_report(source: str, arch: Arch, ptx_text: str, sass_text: str, build_log: str, *,
                  demangled: Mapping[str, str] | None = None, shared_object: bytes | None = None,
                  task: Task | None = None) -> StaticReport:
    """Read the build's PTX, SASS (cuobjdump's listing) and ptxas log into a report; judge the task's
    requirements if given. ``demangled``: readable names of the kernels (a name not there is shown as it
    is); ``shared_object``: the built library's bytes, for the libraries it links."""
    registry = load_registry()
    ptx_hist = dict(ptx_parser.histogram(ptx_text))
    kernels = {name: dict(hist) for name, hist in sass_parser.per_kernel_histogram(sass_text).items()}
    per_function = resources(build_log)
    names = demangled or {}

    all_evidence = [evidence_for(f, arch, source, ptx_hist, kernels) for f in registry.features]
    kernel_reports = [
        KernelReport(name=name, demangled=names.get(name, name), sass=dict(sorted(hist.items())),
                     resources=per_function.get(name, KernelResources()),
                     features=[e.feature for e in all_evidence if name in e.sass])
        for name, hist in kernels.items()
    ]
    report = StaticReport(
        arch=arch, task=task.id if task else None, task_hash=task.content_hash if task else None,
        ptx=dict(sorted(ptx_hist.items())), kernels=kernel_reports, warnings=warnings(build_log),
        features=[e for e in all_evidence if e.in_source or e.in_ptx or e.in_sass],
        policy_violations=policy_violations(source, shared_object),
    )
    if task is not None:
        by_id = {e.feature: e for e in all_evidence}
        report.requirements = [
            judge(req, arch, [by_id[f] for f in req.any_of], all_evidence) for req in task.requirements_for(arch)
        ]
    if not kernels:
        report.notes.append("the build contains no kernel: nothing runs on the GPU")
    if not arch.is_arch_specific:
        report.notes.append(f"{arch.value} is a diagnostic target: the benchmark builds for {arch.specific.value}")
    for warning in report.warnings:
        if warning.meaning:
            report.notes.append(f"ptxas {warning.code or 'warning'}: {warning.meaning}")
    return report
