"""What a task is: declarative, validated, content-hashed data.

Vocabulary follows FlashInfer-Trace where it can (a *definition* with axes, inputs, outputs and a
reference; *workloads* that bind the axes), so public definitions can be imported later. Everything a
prompt, the contract generator or the evaluator needs is here; nothing is implied by code elsewhere.
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator, model_validator

from ptxbench.arch.registry import BENCHMARK_ARCHS, Arch, load_registry
from ptxbench.tasks import formula

TASK_SCHEMA_VERSION = 1

C_IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]*$"

# The baseline of a task whose only implementation is its own reference (an imported definition): what is
# timed is ``baseline(**inputs, **sizes)`` of the reference code, the reference on the inputs in their dtypes.
REFERENCE_BASELINE_CALL = ("the task's own PyTorch reference on the inputs in their own dtypes (`baseline` in its "
                           "reference code), as FlashInfer-Bench times a definition's reference; no vendor library "
                           "implements this task here")


class DType(str, Enum):
    """Element types a task may use, with their C++ and PyTorch spellings."""

    BF16 = "bfloat16"
    F16 = "float16"
    F32 = "float32"
    E4M3 = "float8_e4m3fn"
    E5M2 = "float8_e5m2"
    I32 = "int32"
    I64 = "int64"
    I8 = "int8"

    @property
    def c_type(self) -> str:
        return {
            DType.BF16: "__nv_bfloat16",
            DType.F16: "__half",
            DType.F32: "float",
            DType.E4M3: "__nv_fp8_e4m3",
            DType.E5M2: "__nv_fp8_e5m2",
            DType.I32: "int32_t",
            DType.I64: "int64_t",
            DType.I8: "int8_t",
        }[self]

    @property
    def size(self) -> int:
        return {DType.I64: 8, DType.F32: 4, DType.I32: 4, DType.BF16: 2, DType.F16: 2}.get(self, 1)

    @property
    def mantissa_bits(self) -> int:
        """Explicit mantissa bits: the source of the dtype-aware tolerance."""
        return {DType.BF16: 7, DType.F16: 10, DType.F32: 23, DType.E4M3: 3, DType.E5M2: 2}.get(self, 0)


class Axis(BaseModel):
    """A symbolic size (``M``, ``S``) or a small integer switch (``causal``) passed to the entry point."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=C_IDENTIFIER)
    description: str
    divisible_by: int = Field(default=1, ge=1, description="Every workload's value is a multiple of this; kernels may rely on it.")
    minimum: int = Field(default=1, ge=0)
    choices: list[int] | None = Field(default=None, description="The only values allowed (for switches).")

    def accepts(self, value: int) -> str | None:
        """None when ``value`` is allowed, else the reason it is not."""
        if self.choices is not None and value not in self.choices:
            return f"{self.name}={value} is not one of {self.choices}"
        if value < self.minimum:
            return f"{self.name}={value} is below the minimum {self.minimum}"
        if value % self.divisible_by:
            return f"{self.name}={value} is not a multiple of {self.divisible_by}"
        return None


class InitKind(str, Enum):
    NORMAL = "normal"
    UNIFORM = "uniform"
    POSITIVE = "positive"
    DERIVED = "derived"


class InputInit(BaseModel):
    """How the evaluator draws an input: signed, realistic magnitudes, optionally with outliers, and
    optionally with rows that sit on a large common offset.

    ``derived`` inputs are computed by the task's ``derive_inputs`` from the drawn ones (for example the
    forward output and log-sum-exp that attention backward consumes).

    The row offset exists because a model's logits are not centred: softmax is invariant to a row's common
    offset, so a model has no reason to keep it small, and rows whose values all lie near +100 are what
    catches an exponential taken without subtracting the row maximum (fp32 ``exp`` overflows above 88.7).
    A row is a run along the last dimension.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: InitKind = InitKind.NORMAL
    scale: float = Field(default=1.0, gt=0)
    outlier_fraction: float = Field(default=0.0, ge=0, le=0.1)
    outlier_scale: float = Field(default=1.0, ge=1)
    row_offset: float = Field(default=0.0, description="Added to every element of the chosen rows.")
    row_offset_fraction: float = Field(default=0.0, ge=0, le=1, description=(
        "Share of the rows that get row_offset, chosen at random per draw; at least one row whenever positive."))

    @model_validator(mode="after")
    def _offset_given_together(self) -> "InputInit":
        if (self.row_offset != 0) != (self.row_offset_fraction > 0):
            raise ValueError("row_offset and row_offset_fraction are set together (both or neither)")
        if self.row_offset and self.kind is InitKind.DERIVED:
            raise ValueError("a derived input is not drawn, so it takes no row offset")
        return self


_INIT_FIELDS_ADDED_LATER = ("row_offset", "row_offset_fraction")


class TensorSpec(BaseModel):
    """A contiguous, row-major tensor whose shape is axis names or fixed sizes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=C_IDENTIFIER)
    dtype: DType
    shape: list[str | int]
    description: str
    init: InputInit = Field(default_factory=InputInit)

    def concrete_shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        """A dimension is a size, an axis, or a formula over the axes (``B + 1`` for an indptr array)."""
        return tuple(dim if isinstance(dim, int) else sizes[dim] if dim in sizes else int(formula.evaluate(dim, sizes))
                     for dim in self.shape)

    def numel(self, sizes: dict[str, int]) -> int:
        total = 1
        for dim in self.concrete_shape(sizes):
            total *= dim
        return total


class Tolerance(BaseModel):
    """Element-wise rule ``|out - ref| <= atol + rms_atol * rms(ref) + rtol * |ref| (+ operand_rtol * magnitude)``
    against an fp32
    (or fp64) reference, checked on every element.

    The term scaled by the reference's root-mean-square keeps the rule meaningful for outputs whose
    values sit near zero (attention outputs, probabilities): a fixed ``atol`` would there accept an
    all-zero output. The default for an output dtype is ``rtol = rms_atol = 2 ** -(mantissa_bits - 1)``
    (four units in the last place of the output type: one for the final rounding, the rest for the
    order of accumulation). A task that needs another rule states it with a reason. NaN or Inf in an
    output always fails.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    atol: float = Field(default=0.0, ge=0)
    rtol: float = Field(ge=0)
    rms_atol: float = Field(default=0.0, ge=0)
    operand_rtol: float = Field(
        default=0.0, ge=0,
        description="Allowance for rounding the operands of the output's last matrix product to a 16-bit type, "
        "as tensor-core kernels must: the bound grows by operand_rtol * (|A|·|B|), the product of the operands' "
        "magnitudes, which the reference returns as `<output>_magnitude`. This is the textbook rounding bound of a "
        "dot product, so it is tight where sums cancel and loose nowhere else.",
    )
    reason: str = ""

    @classmethod
    def for_dtype(cls, dtype: DType) -> "Tolerance":
        ulp4 = 2.0 ** -(dtype.mantissa_bits - 1) if dtype.mantissa_bits < 23 else 1e-5
        return cls(rtol=ulp4, rms_atol=ulp4, reason=f"default for {dtype.value}: 4 units in the last place")


class Role(str, Enum):
    TIMED = "timed"
    VISIBLE = "visible"
    HELDOUT = "heldout"


class Workload(BaseModel):
    """One binding of every axis. ``heldout`` workloads are checked but never shown in a prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    role: Role
    sizes: dict[str, int]
    note: str = ""


class Variant(BaseModel):
    """A named setting of the task's switches or size regime (causal with head dim 64, an M that is not a
    multiple of 8), to measure generalization across settings beside generalization across shapes.

    A workload belongs to the one variant whose rule it meets: every axis in ``fixes`` at that value, and
    the condition ``when`` true (a formula over the axes that may compare, e.g. ``M % 8 != 0``). A
    ``heldout`` variant may hold only held-out workloads, so it is hidden wherever held-out workloads are
    (prompts, refinement feedback, Fixit records): its guarantee is the workloads' roles, checked here.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str
    fixes: dict[str, int] = Field(default_factory=dict, description="Axis values every workload of the variant has.")
    when: str | None = Field(default=None, description="A condition over the axes its workloads meet.")
    heldout: bool = False

    def matches(self, sizes: dict[str, int]) -> bool:
        if any(sizes.get(axis) != value for axis, value in self.fixes.items()):
            return False
        return self.when is None or formula.holds(self.when, sizes)


class Requirement(BaseModel):
    """A feature the candidate must *execute* (any one of ``any_of``) on one target.

    ``min_flop_share`` (matrix features) is the least share of the task's FLOPs the feature's
    instructions must perform. ``min_byte_share`` (copy-engine features: TMA, bulk copies) is the least
    share of the task's bytes (``Task.bytes_for``) their transfers must move, read from ncu's byte
    counters, so one token copy does not pass for streaming the data. ``justification`` is required when
    the vendor baseline itself does not use the feature: it says why the task asks for it anyway.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    any_of: list[str] = Field(min_length=1)
    min_flop_share: float | None = Field(default=None, gt=0, le=1)
    min_byte_share: float | None = Field(default=None, gt=0, le=1)
    justification: str = ""

    @property
    def label(self) -> str:
        return " | ".join(self.any_of)


class FlashInferCall(BaseModel):
    """The FlashInfer API an imported definition names (its ``fi_api`` tag), timed beside the task's reference,
    with the arguments of that call the task's tensors do not carry, as the import derived them from the
    definition (``ptxbench.tasks.flashinfer.fi_api``): recorded here so the baseline is data and in the hash."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    api: str = Field(pattern=r"^flashinfer(\.[A-Za-z_][A-Za-z0-9_]*)+$")
    arguments: dict[str, bool | int | float | str] = Field(default_factory=dict)


class Baseline(BaseModel):
    """The vendor baselines the candidate is timed against (the fastest of the task's variants).

    ``call`` is the text generated from the variants the evaluator defines for the task
    (``ptxbench.evaluate.baselines.variants.baseline_text``): kept here so the task's hash changes with it, and
    refused at timing when it differs, so a prompt never promises a baseline that is not run.

    ``library = "reference"`` (imported tasks) times the task's own reference, ``baseline`` in its reference
    code, on the inputs in their own dtypes; its ``call`` is ``REFERENCE_BASELINE_CALL``, unless ``flashinfer``
    names the FlashInfer call timed beside it (the evaluator then checks ``call`` against both variants' text).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    library: Literal["cublas", "cublaslt", "cudnn_or_flash", "torch", "reference"]
    call: str = Field(description="What is timed as the baseline, generated from the task's baseline variants.")
    flashinfer: FlashInferCall | None = Field(default=None, description=(
        "An imported task's FlashInfer call, timed beside its reference (library `reference` only)."))


class Family(str, Enum):
    GEMM = "gemm"
    ATTENTION_FORWARD = "attention_forward"
    ATTENTION_BACKWARD = "attention_backward"
    ATTENTION_DECODE = "attention_decode"
    MEMORY_BOUND = "memory_bound"
    MOE = "moe"


class Task(BaseModel):
    """A benchmark task. Its ``content_hash`` changes whenever anything a result depends on changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = TASK_SCHEMA_VERSION
    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Also the C entry point's name.")
    family: Family
    title: str
    statement: str = Field(min_length=20)
    axes: list[Axis] = Field(min_length=1)
    inputs: list[TensorSpec] = Field(min_length=1)
    outputs: list[TensorSpec] = Field(min_length=1)
    reference: str = Field(description="Python source defining reference(**inputs, **sizes) -> outputs in fp32.")
    flops: str = Field(description="Formula over the axes: useful FLOPs of one call (0 for memory-bound tasks).")
    bytes: str | None = Field(default=None, description="Formula for bytes moved; default: every input read and output written once.")
    floor_bytes: str | None = Field(default=None, description=(
        "Formula for the least bytes any correct kernel must move on every input the task draws, where that is "
        "less than ``bytes`` (which may count data a kernel can skip, e.g. the weights of an expert without "
        "tokens); the physical-floor guard's bytes. Default: ``bytes``."))
    tolerance: dict[str, Tolerance] = Field(default_factory=dict, description="Per output; missing outputs take the dtype default.")
    baseline: Baseline
    workloads: list[Workload] = Field(min_length=2)
    variants: list[Variant] = Field(default_factory=list, description=(
        "Optional: named settings that partition the workloads; held-out ones hold held-out workloads only."))
    requirements: dict[Arch, list[Requirement]]

    @model_validator(mode="before")
    @classmethod
    def _accept_own_hash(cls, data: object) -> object:
        """A task serialised by this model carries its hash, which is derived: drop it and recompute."""
        if isinstance(data, dict) and "content_hash" in data:
            data = {key: value for key, value in data.items() if key != "content_hash"}
        return data

    @field_validator("statement", "reference")
    @classmethod
    def _strip(cls, text: str) -> str:
        return text.strip("\n")

    @model_validator(mode="after")
    def _consistent(self) -> "Task":
        axis_names = [a.name for a in self.axes]
        tensor_names = [t.name for t in [*self.inputs, *self.outputs]]
        for label, names in (("axis", axis_names), ("tensor", tensor_names)):
            if len(set(names)) != len(names):
                raise ValueError(f"duplicate {label} names in {names}")
        if set(axis_names) & set(tensor_names) or "stream" in axis_names + tensor_names:
            raise ValueError("axis and tensor names must differ from each other and from 'stream'")
        for tensor in [*self.inputs, *self.outputs]:
            unknown = {n for d in tensor.shape if isinstance(d, str) for n in formula.names_in(d)} - set(axis_names)
            if unknown:
                raise ValueError(f"tensor {tensor.name} uses unknown axes {sorted(unknown)}")
        for tensor in self.outputs:
            if tensor.init.kind is not InitKind.NORMAL or tensor.init != InputInit():
                raise ValueError(f"output {tensor.name} cannot have an init rule")
        for expr in filter(None, (self.flops, self.bytes, self.floor_bytes)):
            unknown = formula.names_in(expr) - set(axis_names)
            if unknown:
                raise ValueError(f"formula {expr!r} uses unknown axes {sorted(unknown)}")
        unknown_outputs = set(self.tolerance) - {o.name for o in self.outputs}
        if unknown_outputs:
            raise ValueError(f"tolerance given for unknown outputs {sorted(unknown_outputs)}")
        self._check_workloads(axis_names)
        self._check_variants(axis_names)
        self._check_requirements()
        if "def reference(" not in self.reference:
            raise ValueError("reference must define `def reference(...)`")
        if any(t.init.kind is InitKind.DERIVED for t in self.inputs) and "def derive_inputs(" not in self.reference:
            raise ValueError("derived inputs need `def derive_inputs(...)` in the reference code")
        if self.baseline.library == "reference" and ("def baseline(" not in self.reference or (
                self.baseline.flashinfer is None and self.baseline.call != REFERENCE_BASELINE_CALL)):
            raise ValueError("a reference baseline needs `def baseline(...)` in the reference code and, without a "
                             f"FlashInfer call, baseline.call = {REFERENCE_BASELINE_CALL!r}")
        if self.baseline.flashinfer is not None and self.baseline.library != "reference":
            raise ValueError("baseline.flashinfer belongs to an imported task's reference baseline (library reference)")
        return self

    def _check_workloads(self, axis_names: list[str]) -> None:
        names = [w.name for w in self.workloads]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate workload names in {names}")
        roles = [w.role for w in self.workloads]
        if roles.count(Role.TIMED) != 1:
            raise ValueError("a task needs exactly one timed workload")
        if Role.HELDOUT not in roles:
            raise ValueError("a task needs at least one held-out workload")
        axes = {a.name: a for a in self.axes}
        for workload in self.workloads:
            if set(workload.sizes) != set(axis_names):
                raise ValueError(f"workload {workload.name} binds {sorted(workload.sizes)}, expected {sorted(axis_names)}")
            for name, value in workload.sizes.items():
                problem = axes[name].accepts(value)
                if problem:
                    raise ValueError(f"workload {workload.name}: {problem}")
        shown = {tuple(sorted(w.sizes.items())) for w in self.workloads if w.role is not Role.HELDOUT}
        for workload in self.held_out():
            if tuple(sorted(workload.sizes.items())) in shown:
                raise ValueError(f"held-out workload {workload.name} repeats a visible one")

    def _check_variants(self, axis_names: list[str]) -> None:
        if not self.variants:
            return
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate variant names in {names}")
        axes = {a.name: a for a in self.axes}
        for variant in self.variants:
            if not variant.fixes and variant.when is None:
                raise ValueError(f"variant {variant.name} fixes no axis and has no condition")
            for name, value in variant.fixes.items():
                if name not in axes:
                    raise ValueError(f"variant {variant.name} fixes unknown axis {name}")
                problem = axes[name].accepts(value)
                if problem:
                    raise ValueError(f"variant {variant.name}: {problem}")
            unknown = formula.names_in(variant.when) - set(axis_names) if variant.when else set()
            if unknown:
                raise ValueError(f"variant {variant.name}: condition {variant.when!r} uses unknown axes {sorted(unknown)}")
        members: dict[str, list[Workload]] = {name: [] for name in names}
        for workload in self.workloads:
            matched = [v.name for v in self.variants if v.matches(workload.sizes)]
            if len(matched) != 1:
                raise ValueError(f"workload {workload.name} must belong to exactly one variant, "
                                 f"it matches {matched or 'none'}")
            members[matched[0]].append(workload)
        for variant in self.variants:
            if not members[variant.name]:
                raise ValueError(f"variant {variant.name} has no workload")
            shown = [w.name for w in members[variant.name] if w.role is not Role.HELDOUT]
            if variant.heldout and shown:
                raise ValueError(f"held-out variant {variant.name} holds workloads a prompt shows: {shown}")

    def _check_requirements(self) -> None:
        missing = [a.value for a in BENCHMARK_ARCHS if a not in self.requirements]
        if missing:
            raise ValueError(f"requirements missing for {missing}")
        registry = load_registry()
        for arch, requirements in self.requirements.items():
            if not arch.is_arch_specific:
                raise ValueError(f"requirements are per benchmark target (sm_90a, sm_100a), not {arch.value}")
            for requirement in requirements:
                for feature_id in requirement.any_of:
                    try:
                        feature = registry.get(feature_id)
                    except KeyError as exc:
                        raise ValueError(exc.args[0]) from None
                    if not feature.supported_on(arch):
                        raise ValueError(f"{feature_id} is not available on {arch.value}")
                if requirement.min_flop_share is not None and any(
                    registry.get(f).category.value != "matrix" for f in requirement.any_of
                ):
                    raise ValueError("min_flop_share applies to matrix features only")

    # ---- derived views -------------------------------------------------------------------------

    @computed_field  # type: ignore[prop-decorator]
    @property
    def content_hash(self) -> str:
        """sha256 of the canonical JSON of every field (the hash itself excluded)."""
        data = self.model_dump(mode="json", exclude={"content_hash"})
        if not data["variants"]:  # a task without variants keeps the hash it had before variants existed
            del data["variants"]
        if data["floor_bytes"] is None:  # likewise a task whose floor is its bytes
            del data["floor_bytes"]
        if data["baseline"]["flashinfer"] is None:  # likewise a baseline without a FlashInfer call
            del data["baseline"]["flashinfer"]
        for tensor in (*data["inputs"], *data["outputs"]):  # likewise an input drawn without a row offset
            for key in _INIT_FIELDS_ADDED_LATER:
                if tensor["init"][key] == 0:
                    del tensor["init"][key]
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    @property
    def entry_point(self) -> str:
        return self.id

    def timed(self) -> Workload:
        return next(w for w in self.workloads if w.role is Role.TIMED)

    def shown(self) -> list[Workload]:
        """Workloads a prompt may show: the timed one and the visible variants."""
        return [w for w in self.workloads if w.role is not Role.HELDOUT]

    def held_out(self) -> list[Workload]:
        return [w for w in self.workloads if w.role is Role.HELDOUT]

    def variant_of(self, workload: Workload | str) -> Variant | None:
        """The variant a workload belongs to (None for a task without variants)."""
        sizes = (self.workload(workload) if isinstance(workload, str) else workload).sizes
        return next((v for v in self.variants if v.matches(sizes)), None)

    def held_out_variants(self) -> list[Variant]:
        return [v for v in self.variants if v.heldout]

    def workload(self, name: str) -> Workload:
        for workload in self.workloads:
            if workload.name == name:
                return workload
        raise KeyError(f"task {self.id} has no workload {name!r}")

    def flops_for(self, sizes: dict[str, int]) -> float:
        return formula.evaluate(self.flops, sizes)

    def bytes_for(self, sizes: dict[str, int]) -> float:
        if self.bytes:
            return formula.evaluate(self.bytes, sizes)
        return float(sum(t.numel(sizes) * t.dtype.size for t in [*self.inputs, *self.outputs]))

    def floor_bytes_for(self, sizes: dict[str, int]) -> float:
        """The bytes the physical-floor guard divides by the datasheet bandwidth: a lower bound, so an honest
        kernel that skips what it may skip is never faster than the floor."""
        return formula.evaluate(self.floor_bytes, sizes) if self.floor_bytes else self.bytes_for(sizes)

    def tolerance_for(self, output: str) -> Tolerance:
        spec = next(o for o in self.outputs if o.name == output)
        return self.tolerance.get(output) or Tolerance.for_dtype(spec.dtype)

    def requirements_for(self, arch: Arch) -> list[Requirement]:
        return self.requirements.get(arch.specific, [])
