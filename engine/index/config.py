"""``[index]`` TOML table: the node index's HNSW and search settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.config import check

SPACES = ("cosine", "ip", "l2")


@dataclass(frozen=True)
class IndexConfig:
    """Settings of :class:`engine.index.NodeIndex`.

    space: "cosine" (vectors are L2-normalised on the way in; similarity = cos),
        "ip" (similarity = dot product) or "l2" (similarity = -squared distance).
    M, ef_construction: HNSW graph degree and build beam (hnswlib's names).
    ef_search: query beam; raised to k when k is larger. Defaults give
        recall@8 >= 0.95 on MiniLM sentence embeddings (tests/engine/index).
    capacity: initial HNSW capacity in nodes; it doubles when full.
    exact_max: restricted searches over at most this many nodes run exactly
        (NumPy over the set); larger sets go through the HNSW graph.
    seed: HNSW level-assignment seed; num_threads: hnswlib threads for batch
        adds and batch queries (-1 = all cores).
    """

    space: Literal["cosine", "ip", "l2"] = "cosine"
    M: int = 16
    ef_construction: int = 200
    ef_search: int = 64
    capacity: int = 1024
    exact_max: int = 2048
    seed: int = 100
    num_threads: int = -1

    def __post_init__(self):
        check(self.space in SPACES, f"index.space must be one of {', '.join(SPACES)}, got {self.space!r}")
        check(2 <= self.M <= 256, f"index.M must be in [2, 256], got {self.M}")
        check(self.ef_construction >= self.M, f"index.ef_construction must be >= M={self.M}, got {self.ef_construction}")
        check(self.ef_search >= 1, f"index.ef_search must be >= 1, got {self.ef_search}")
        check(self.capacity >= 1, f"index.capacity must be >= 1, got {self.capacity}")
        check(self.exact_max >= 0, f"index.exact_max must be >= 0, got {self.exact_max}")
        check(self.seed >= 0, f"index.seed must be >= 0, got {self.seed}")
        check(self.num_threads == -1 or self.num_threads >= 1, f"index.num_threads must be -1 or >= 1, got {self.num_threads}")


def index_config_from_table(table=None, where: str = "index") -> IndexConfig:
    """``IndexConfig`` from an ``[index]`` TOML table (None or {} = defaults); bad keys raise ConfigError."""
    from engine.config import from_dict

    return from_dict(IndexConfig, table, where)
