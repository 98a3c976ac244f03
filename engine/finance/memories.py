"""Pipe+Mem0 on arrays: mem0's extraction and retrieval without the library's store (``memory.mem0_store = "arrays"``).

The default is the real library (:class:`engine.baselines.mem0.Mem0Memory`, ``"library"``), on mem0's
FAISS store held in memory with the round's snapshot kept from each ``add``'s results; over 300 trading
days of the default synthetic market it costs 1.3x to 1.7x this store's CPU time (benchmarks/test_mem0_store.py;
before, on mem0's local Qdrant with the snapshot re-exported every round, 60 days took 87 s and the
per-day cost kept growing). :class:`ArrayMem0Memory` keeps the behaviour on arrays, for comparison:

* writing: the same prepared completion (mem0's extraction prompt under a real
  backend, the rule-based ``{"memory": [{"text": ...}]}`` under the simulated
  one) is parsed as mem0 2.x parses it, and each text is added unless its MD5
  hash is already stored (mem0 2.x de-duplicates against the 10 memories its
  search returns and the batch; this store against every stored hash);
* reading: the snapshot has the layout of ``Mem0Memory.snapshot()`` and is read
  by :class:`engine.baselines.mem0.Mem0Reader` (mem0's own ``score_and_rank``).
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

import numpy as np

from engine import codec
from engine.baselines.common import parse_json, str_array, texts_of


@codec.data(context=("embedder",))
class ArrayMem0Memory:
    name = "mem0"

    def __init__(self, config=None, *, embedder):
        from engine.baselines.mem0 import Mem0Config

        self.config = config or Mem0Config()
        self.embedder = embedder
        self.texts: list[str] = []
        self.hashes: set[str] = set()
        self.vecs = np.zeros((0, embedder.dim), dtype=np.float32)
        self.version = 0
        self._snap: dict | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def snapshot(self) -> dict[str, np.ndarray]:
        if self._snap is not None and int(self._snap["version"][0]) == self.version:
            return self._snap
        n = len(self.texts)
        self._snap = {
            "id": np.arange(n, dtype=np.int64),
            "mem0_id": str_array(f"m{i}" for i in range(n)),
            "memory": str_array(self.texts),
            "embedding": self.vecs[:n],
            "version": np.array([self.version], dtype=np.int64),
        }
        return self._snap

    def reader(self, snapshot: Mapping[str, np.ndarray]):
        from engine.baselines.mem0 import Mem0Reader

        return Mem0Reader(self.config, self.embedder, snapshot)

    def apply(self, updates: Sequence[Mapping[str, np.ndarray]]) -> None:
        new = []
        for u in updates:
            if not u:
                continue
            data = parse_json((texts_of(u.get("completion")) or [""])[0])
            items = data.get("memory", []) if isinstance(data, dict) else []
            for m in items:
                text = m.get("text") if isinstance(m, dict) else None
                if not isinstance(text, str) or not text.strip():
                    continue
                h = hashlib.md5(text.encode()).hexdigest()
                if h in self.hashes:
                    continue
                self.hashes.add(h)
                new.append(text)
        if new:
            self.vecs = np.vstack([self.vecs, self.embedder.embed(new)])
            self.texts.extend(new)
            self.version += 1
