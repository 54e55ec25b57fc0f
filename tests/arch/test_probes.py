"""Every registry mapping, proven: each probe is compiled for each target and its SASS read.

For a target in a feature's ``sass`` table every pattern must match the probe's SASS and the PTX must
show the feature; for a target in ``rejected`` ptxas must refuse the probe as unsupported there.
"""

from __future__ import annotations

import re

import pytest

from ptxbench.arch.registry import BENCHMARK_ARCHS, Arch, FeatureCategory, load_registry, probe_path
from ptxbench.check import check_file
from ptxbench.records.build import CompileFailure

REGISTRY = load_registry()
SUPPORTED = [(f, a) for f in REGISTRY.features for a in f.sass]
REJECTED = [(f, a) for f in REGISTRY.features for a in f.rejected]


@pytest.mark.parametrize(("feature", "arch"), SUPPORTED, ids=lambda x: getattr(x, "id", getattr(x, "value", x)))
def test_probe_lowers_to_the_registered_sass(feature, arch: Arch) -> None:  # type: ignore[no-untyped-def]
    report = check_file(probe_path(feature), arch)
    assert report.build.ok, report.build.log
    static = report.static
    assert static is not None
    mnemonics = {m for kernel in static.kernels for m in kernel.sass}
    for pattern in feature.sass[arch]:
        assert any(re.search(pattern, m) for m in mnemonics), f"{feature.id} on {arch.value}: no SASS matches {pattern!r}"
    assert feature.in_ptx(set(static.ptx)), f"{feature.id}: no PTX instruction matches {feature.ptx}"
    assert feature.in_source(probe_path(feature).read_text())
    evidence = {e.feature: e for e in static.features}[feature.id]
    assert evidence.in_source and evidence.in_ptx and evidence.in_sass


@pytest.mark.parametrize(("feature", "arch"), REJECTED, ids=lambda x: getattr(x, "id", getattr(x, "value", x)))
def test_probe_is_rejected_where_the_registry_says(feature, arch: Arch) -> None:  # type: ignore[no-untyped-def]
    report = check_file(probe_path(feature), arch)
    assert not report.build.ok
    assert report.build.diagnosis is not None
    assert report.build.diagnosis.failure is CompileFailure.UNSUPPORTED_ON_TARGET, report.build.log
    assert feature.rejected[arch] in report.build.diagnosis.summary or feature.ptx_family in report.build.diagnosis.summary


def test_registry_covers_what_the_benchmark_needs() -> None:
    ids = set(REGISTRY.ids())
    required = {
        "wgmma.bf16", "wgmma.f16", "wgmma.tf32", "wgmma.fp8", "wgmma.int8",
        "tma.load", "tma.load_multicast", "tma.store", "tma.reduce", "tma.prefetch",
        "bulk.copy", "bulk.reduce", "bulk.prefetch", "mbarrier", "setmaxnreg", "stmatrix", "ldmatrix",
        "cp.async", "cluster.barrier", "cluster.dsmem", "cluster.st_async", "pdl", "elect.sync",
        "tcgen05.mma.f16", "tcgen05.mma.tf32", "tcgen05.mma.f8f6f4", "tcgen05.mma.i8", "tcgen05.mma.mxf8f6f4",
        "tcgen05.alloc", "tcgen05.ld", "tcgen05.st", "tcgen05.cp", "tcgen05.commit", "tma.load_2cta",
    }
    assert required <= ids, sorted(required - ids)


def test_every_feature_has_a_probe_and_a_benchmark_target() -> None:
    for feature in REGISTRY.features:
        assert probe_path(feature).is_file(), feature.probe
        assert any(arch in feature.sass for arch in BENCHMARK_ARCHS), feature.id


def test_wgmma_is_hopper_only_and_tcgen05_blackwell_only() -> None:
    for feature in REGISTRY.features:
        if feature.id.startswith("wgmma."):
            assert list(feature.sass) == [Arch.SM_90A] and Arch.SM_100A in feature.rejected
            assert feature.category is FeatureCategory.MATRIX and feature.matrix is not None
        if feature.id.startswith("tcgen05."):
            assert Arch.SM_90A not in feature.sass and Arch.SM_100A in feature.sass


def test_matrix_flops_per_counted_instruction() -> None:
    shape = REGISTRY.get("wgmma.bf16").matrix
    assert shape is not None
    # One wgmma m64n128k16 = 2*64*128*16 FLOPs, counted once per warp of the warpgroup (4 times).
    assert shape.flops("HGMMA.64x128x16.F32.BF16") == 2 * 64 * 128 * 16 // 4
    assert shape.flops("HMMA.16816.F32.BF16") is None
