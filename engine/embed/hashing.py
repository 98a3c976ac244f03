"""Deterministic feature-hashing embedder: LEXICAL, not semantic.

Each text is lower-cased, encoded as UTF-8 and turned into two bags of
features, hashed with 64-bit FNV-1a + a splitmix64 finaliser into ``dim``
signed buckets (the "hashing trick", Weinberger et al. 2009):

* word n-grams (1..``word_ngrams``) over tokens = maximal runs of ASCII
  letters/digits or non-ASCII bytes;
* byte n-grams (``char_ngram_range``) of the text padded with one space on
  each side (identical to character n-grams for ASCII text).

Each bag is L2-normalised, the two are mixed as
``(1 - char_weight) * words + char_weight * chars`` and the result is
normalised again. Two texts are close when they share words and spellings;
paraphrases with different words are NOT close. Use it for tests, throughput
runs and machines without the ``embed`` extra; use MiniLM (or an
OpenAI-compatible server) when similarity must mean meaning, e.g. for ToE's
cosine threshold lambda = 0.8.

The vector of a text depends only on (text, dim, seed, n-gram settings):
no vocabulary, no fitting, same result in every process.
"""

from __future__ import annotations

import numpy as np

from engine.embed.base import CachedEmbedder
from engine.errors import InputError
from kernels.text_hashing import hash_embed_kernel


class HashingEmbedder(CachedEmbedder):
    """Lexical feature-hashing embedder (see module docstring); deterministic, no model."""

    def __init__(
        self,
        dim: int = 384,
        *,
        word_ngrams: int = 2,
        char_ngram_range: tuple[int, int] = (3, 5),
        char_weight: float = 0.5,
        seed: int = 0,
        batch_size: int = 4096,
        cache_size: int = 100_000,
    ):
        if not 1 <= word_ngrams <= 8:
            raise InputError(f"word_ngrams must be in [1, 8], got {word_ngrams}")
        lo, hi = char_ngram_range
        if not 1 <= lo <= hi <= 16:
            raise InputError(f"char_ngram_range must satisfy 1 <= lo <= hi <= 16, got {char_ngram_range}")
        if not 0.0 <= char_weight <= 1.0:
            raise InputError(f"char_weight must be in [0, 1], got {char_weight}")
        if seed < 0:
            raise InputError(f"seed must be >= 0, got {seed}")
        # a text's vector depends on it and these settings only (module docstring): every embedder with the same
        # settings in a process shares one cache, and a pickled embedder (each run's method on a Ray worker)
        # carries none
        super().__init__(dim=dim, batch_size=batch_size, cache_size=cache_size,
                         shared=("hashing", int(dim), int(word_ngrams), (int(lo), int(hi)), float(char_weight), int(seed)))
        self.word_ngrams = int(word_ngrams)
        self.char_ngram_range = (int(lo), int(hi))
        self.char_weight = float(char_weight)
        self.seed = int(seed)
        self.name = f"hashing-{self.dim}"

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        encoded = [t.lower().encode("utf-8", "surrogatepass") for t in texts]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        if buf.size == 0:
            buf = np.zeros(1, dtype=np.uint8)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        hash_embed_kernel(
            buf, offsets, self.dim, np.uint64(self.seed), self.word_ngrams,
            self.char_ngram_range[0], self.char_ngram_range[1], self.char_weight, out,
        )
        return out
