"""Text embedders behind one interface (:class:`Embedder`), built from ``[embed]``.

``make_embedder(EmbedConfig(...))`` returns an object with ``name``, ``dim`` and
``embed(texts) -> f4[n, dim]`` (unit rows, batched, cached by text hash):

* ``hashing``: lexical feature hashing (word + character n-grams), no model;
* ``minilm``: all-MiniLM-L6-v2 sentence embeddings (extra ``embed``), offline;
* ``openai``: any OpenAI-compatible ``/v1/embeddings`` server (vLLM, llama.cpp).

Heavy backends import lazily: importing this package loads numpy and numba only.
"""

from engine.embed.base import CachedEmbedder, Embedder, check_texts, l2_normalise, text_key
from engine.embed.config import EmbedConfig, embedder_from_table, make_embedder
from engine.embed.hashing import HashingEmbedder

__all__ = [
    "CachedEmbedder",
    "EmbedConfig",
    "Embedder",
    "HashingEmbedder",
    "check_texts",
    "embedder_from_table",
    "l2_normalise",
    "make_embedder",
    "text_key",
]
