"""Similarity search over experience nodes (hnswlib, labels = node ids)."""

from engine.index.config import IndexConfig, index_config_from_table
from engine.index.node_index import NodeIndex, build_index
from engine.index.subtrees import SubtreeIndex

__all__ = ["IndexConfig", "NodeIndex", "SubtreeIndex", "build_index", "index_config_from_table"]
