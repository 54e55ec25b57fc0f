"""Every word a model is given, in one place under one version.

``task`` renders a task's section, ``context`` the ``arch`` and ``full`` conditions' reference text,
``conversation`` the opening and feedback turns of a run, ``fixit`` the repair and explanation
prompts and the Fixit training records' text. ``PROMPT_VERSION`` covers all of them: it is recorded
with every generated item, in the header of every generation and repair run (a resume under other
prompts is refused) and in every Fixit data set record.

``PROMPT_DIGEST`` is the sha256 of every prompt rendered on fixed inputs (tests/prompts recomputes
it): a change to the words, here or in what they are read from (the registry, the guides, the wrapper
header, the contract header), fails that test until ``PROMPT_VERSION`` is bumped and the digest is
updated. A task's own text needs no bump: its content hash is recorded beside the version.
"""

# 4: the wrapper header of the full context grows named steps (rings, tile scheduler, wgmma widths, A from
# registers); 3: one version for task, context, conversation and Fixit prompts (was task-2, pack-1)
PROMPT_VERSION = 4
PROMPT_DIGEST = "4976e128cb9ba74cac690fbdee767b2016cccdb9fca4004ff7bf1a43c9f922fd"
