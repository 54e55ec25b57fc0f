"""The vendor baselines a candidate is timed against: every implementation of exactly a task's work that can be
had, fastest wins. ``variants`` is the table of every task's variants (and the torch and Liger families); one
module per further family of variants (``attention``: paged, ragged and fp8 attention; ``mla``: MLA decode;
``serving``: the serving-path ops; ``flashinfer``: FlashInfer's wrappers, where installed; ``flashinfer_api``: the FlashInfer API an imported task's definition names, beside its reference; ``fa3``:
FlashAttention-3's own forward kernels, where installed; ``cudnn_frontend``: cuDNN's own fp8 attention through
the cuDNN frontend's graph API, where installed; ``reference``: a
task's own PyTorch reference where no library implements it); ``calls``, the vocabulary of a setup and its
timed call that they all share; ``cache``, the baselines' times, signed, per GPU and library versions; ``freshness``, when the sweep profile
measures a cached clean time again. Nothing
here imports torch at module level: the evaluator reads the variants on machines without it."""
