"""Every word a model is given, in one place under one version.

``task`` renders a task's section, ``context`` the ``arch`` and ``full`` conditions' reference text,
``conversation`` the opening and feedback turns of a run, ``fixit`` the repair and explanation
prompts and the Fixit training records' text. ``PROMPT_VERSION`` covers all of them: it is recorded
with every generated item, in the header of every generation and repair run (a resume under other
prompts is refused) and in every Fixit data set record.

``PROMPT_DIGEST`` is the sha256 of every prompt rendered on fixed inputs (tests/prompts recomputes
it): a change to the words, here or in what they are read from (the registry, the guides, the wrapper
header, the contract header), fails that test until ``PROMPT_VERSION`` is bumped and the digest is
updated. A task's own text needs no bump: its content hash is recorded beside the version. Nor does the
published baseline quality (package data that ``benchmarks/baselines.py`` rewrites), from which a task's text
says that its baseline is weak and its speed verdict SOL: neither number records it, so a new measurement can
change that sentence for a task under the same version.
"""

# 5: where the published baseline quality calls a task's best baseline weak, the task text says its speed is judged
# by the SOL score (issue #37); 4: the wrapper header of the full context grows named steps (rings, tile scheduler,
# wgmma widths, A from registers); 3: one version for task, context, conversation and Fixit prompts (was task-2,
# pack-1)
PROMPT_VERSION = 5
PROMPT_DIGEST = "88dc3aec682ae80dc9e60ccc20165a5ab8e3a959d40df6d433639b1b8fad44ca"
