"""Batch engine for experience management in self-evolving LLM agents.

``engine`` imports neither ray nor vllm; those load lazily where they are used.
"""

__version__ = "0.1.0"
