"""Fixit: from failed kernels to verified repairs, explanations, an SFT set and LoRA training."""
