"""Model providers behind one protocol; ``get_provider('openai:gpt-5')`` imports only the one asked for."""

from ptxbench.llm.providers.base import PROVIDERS, ModelSpec, Provider, get_provider, parse_model

__all__ = ["PROVIDERS", "ModelSpec", "Provider", "get_provider", "parse_model"]
