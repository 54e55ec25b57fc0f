"""Refinement: a model's answers graded and fed back over turns, above model access (``llm``) and the
evaluator (``evaluate``). ``loop`` runs ``generate`` and ``run`` (and Fixit's repairs); ``graders`` turns a
check or a GPU evaluation into what the model is told; ``generations`` reads completions made elsewhere
as candidates for ``eval``."""
