"""The PTX wrapper header (``ptx_wrappers.cuh``) and its handling in ``wrappers``, plus the per-target
guides (``guide_*.md``) that the ``full`` prompt condition shows (rendered by ``ptxbench.prompts.context``)."""
