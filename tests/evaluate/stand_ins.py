"""What the CPU stand-ins of the optional baseline libraries (fake_flashinfer.py, fake_fa3.py, fake_cudnn.py) and
their tests share: the record of the calls a stand-in received, and the checks every library's variants must pass
(declared for exactly the tasks the library covers; run on a task's cheapest workload)."""

from __future__ import annotations

from typing import Any

from ptxbench.evaluate.baselines.variants import variant_specs, variants_for
from ptxbench.tasks.loader import bundled_suite
from ptxbench.tasks.model import Task, Workload


class RecordedCalls:
    """A stand-in's state: every call it received as ``(name, args, kwargs)``, and, when it only counts (``log``
    given, the timed-call audit of test_baselines.py), each kernel launch logged as ``<prefix>.<name>``."""

    prefix = ""

    def __init__(self, log: list[str] | None) -> None:
        self.log = log
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def launches(self, name: str) -> bool:
        """Whether the call ``name`` launches a kernel (the library's planning calls do not)."""
        return True

    def record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls.append((name, args, kwargs))
        if self.log is not None and self.launches(name):
            self.log.append(f"{self.prefix}.{name}")

    def named(self, name: str) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
        return [(args, kwargs) for called, args, kwargs in self.calls if called == name]


def smallest_workload(task: Task) -> Workload:
    """The task's cheapest workload of any role: the stand-in and the reference run it on the CPU."""
    return min(task.workloads, key=lambda w: task.bytes_for(w.sizes))


def assert_declared_exactly(prefix: str, covered: dict[str, set[str]], requires: tuple[str, ...], named: str) -> None:
    """The variants whose names start with ``prefix`` are those ``covered`` lists, task by task, each needing the
    modules ``requires`` and described in its task's baseline text, which names the library as ``named``."""
    for task in bundled_suite():
        names = {name for name in variants_for(task.id) if name.startswith(prefix)} \
            if task.baseline.library != "reference" else set()
        assert names == covered.get(task.id, set()), task.id
        for name in names:
            variant = variant_specs(task)[name]
            assert variant.requires == requires
            assert named in task.baseline.call and variant.description in task.baseline.call
