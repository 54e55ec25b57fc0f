"""Model access only: providers behind one protocol, the request, the completion cache, pricing, and the
extraction of a source file from an answer (prompt text is in ``prompts``, the refinement loop in ``refine``)."""
