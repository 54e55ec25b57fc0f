"""The LLM harness: providers, prompts, extraction and multi-turn refinement."""
