"""Similarity search over experience nodes (hnswlib, labels = node ids) and merge candidates."""

from engine.index.config import IndexConfig, index_config_from_table
from engine.index.merge import DEFAULT_MERGE_THRESHOLD, MergeCandidates, merge_candidates
from engine.index.node_index import NodeIndex, build_index

__all__ = ["DEFAULT_MERGE_THRESHOLD", "IndexConfig", "MergeCandidates", "NodeIndex", "build_index", "index_config_from_table", "merge_candidates"]
