"""specjax: tree-based speculative decoding as jit-compiled pure JAX functions."""

__version__ = "0.1.0"
