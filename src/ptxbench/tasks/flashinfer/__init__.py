"""FlashInfer-Trace definitions, their workloads and their blobs imported as PTXBench tasks.

``schema`` (the records read), ``dataset`` (a dataset folder), ``blobs`` (index tensors in safetensors),
``layouts`` (index inputs and each workload's layout), ``derive_source`` (the task's ``derive_inputs``),
``scalars``, ``work`` (FLOPs and bytes), ``workloads`` (sizes and roles), ``reference_text``, ``mapping``
(the task data), ``toml_text``, ``importer`` (the entry points and the summary)."""

from ptxbench.tasks.flashinfer.importer import (ImportedTask, ImportOutcome, ImportSummary, import_dataset,
                                                import_definition, load_summary)
from ptxbench.tasks.flashinfer.schema import ImportProblem

__all__ = ["ImportProblem", "ImportOutcome", "ImportSummary", "ImportedTask", "import_dataset", "import_definition",
           "load_summary"]
