"""Appendix E.1: source-code similarity of MemTools and average-linkage clustering.

Three similarities between two tool sources: token Jaccard (Python tokenizer,
comments and layout tokens removed, |Ti & Tj| / |Ti | Tj|), normalised sequence
similarity (difflib ratio of the same token sequences) and AST sequence
similarity (difflib ratio of the ``ast.walk`` node-type sequences).
Clustering: average-linkage agglomerative over pairwise similarities, merging
while the best average similarity is >= ``tau`` (0.5 in the paper); the
cluster ratio is ``clusters / tools``.
"""

from __future__ import annotations

import ast
import difflib
import io
import tokenize
from typing import Callable, Sequence

import numpy as np

from engine.errors import InputError

_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}


def code_tokens(source: str) -> list[str]:
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type not in _SKIP]
    except (tokenize.TokenError, IndentationError, SyntaxError) as exc:
        raise InputError(f"tool source could not be tokenized: {exc}") from exc


def ast_types(source: str) -> list[str]:
    try:
        return [type(n).__name__ for n in ast.walk(ast.parse(source))]
    except SyntaxError as exc:
        raise InputError(f"tool source could not be parsed: {exc}") from exc


def token_jaccard(a: str, b: str) -> float:
    ta, tb = set(code_tokens(a)), set(code_tokens(b))
    return len(ta & tb) / len(ta | tb) if (ta or tb) else 1.0


def sequence_similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, code_tokens(a), code_tokens(b), autojunk=False).ratio()


def ast_similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, ast_types(a), ast_types(b), autojunk=False).ratio()


METRICS: dict[str, Callable[[str, str], float]] = {
    "token_jaccard": token_jaccard, "normalized_sequence": sequence_similarity, "ast_sequence": ast_similarity,
}


def similarity_matrix(sources: Sequence[str], metric: str = "token_jaccard") -> np.ndarray:
    """``f8[n, n]`` pairwise similarities (diagonal 1)."""
    if metric not in METRICS:
        raise InputError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
    f = METRICS[metric]
    n = len(sources)
    s = np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            s[i, j] = s[j, i] = f(sources[i], sources[j])
    return s


def average_linkage_clusters(sim: np.ndarray, tau: float = 0.5) -> np.ndarray:
    """``i8[n]`` cluster labels: merge the pair of clusters with the highest average similarity while >= tau."""
    sim = np.asarray(sim, dtype=np.float64)
    if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
        raise InputError(f"sim must be square [n, n], got shape {sim.shape}")
    clusters = [[i] for i in range(sim.shape[0])]
    while len(clusters) > 1:
        best, pair = -np.inf, None
        for a in range(len(clusters)):
            for b in range(a + 1, len(clusters)):
                v = sim[np.ix_(clusters[a], clusters[b])].mean()
                if v > best:
                    best, pair = v, (a, b)
        if best < tau:
            break
        a, b = pair
        clusters[a] += clusters.pop(b)
    labels = np.empty(sim.shape[0], dtype=np.int64)
    for k, members in enumerate(clusters):
        labels[members] = k
    return labels


def cluster_ratio(sources: Sequence[str], metric: str = "token_jaccard", tau: float = 0.5) -> float:
    """Number of clusters / number of tools (E.1; higher = less redundant generation)."""
    if not sources:
        raise InputError("cluster_ratio needs at least one tool source")
    labels = average_linkage_clusters(similarity_matrix(sources, metric), tau)
    return len(set(labels.tolist())) / len(sources)
