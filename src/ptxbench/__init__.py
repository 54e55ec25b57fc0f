"""PTXBench: do LLM-written GPU kernels use architecture-specific PTX, correctly and fast?"""

__version__ = "0.1.0"
