"""TF-IDF cosine over short texts, as the seed's retrieval computes it (seed 002 step 1, ``retrieve_relevant``).

The seed fits ``sklearn.feature_extraction.text.TfidfVectorizer(max_features=100)``
on the domain's past problems plus the current one and ranks by cosine. This is
that vectorizer's arithmetic with its defaults (scikit-learn 1.x), without the
dependency: lowercase, tokens ``(?u)\\b\\w\\w+\\b``, the ``max_features`` terms
of highest corpus frequency (ties as sklearn's ``argsort`` leaves them), raw counts times smoothed idf
``ln((1 + n) / (1 + df)) + 1``, rows L2-normalised. A test checks it against
scikit-learn where that is installed.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

import numpy as np

TOKEN = re.compile(r"(?u)\b\w\w+\b")


def tfidf_matrix(texts: Sequence[str], max_features: int = 100) -> np.ndarray:
    """``f8[n, v]`` TF-IDF rows of ``texts`` (L2-normalised; an all-zero row stays zero)."""
    docs = [TOKEN.findall(str(t).lower()) for t in texts]
    freq = Counter(w for d in docs for w in d)
    vocab = sorted(freq)
    if max_features and len(vocab) > max_features:  # sklearn's _limit_features: argsort(-tfs) over sorted terms
        tfs = np.array([freq[w] for w in vocab], dtype=np.int64)
        vocab = sorted(vocab[j] for j in (-tfs).argsort()[:max_features])
    col = {w: j for j, w in enumerate(vocab)}
    X = np.zeros((len(docs), len(vocab)), dtype=np.float64)
    for i, d in enumerate(docs):
        for w in d:
            j = col.get(w)
            if j is not None:
                X[i, j] += 1.0
    n = len(docs)
    df = (X > 0).sum(axis=0)
    X *= np.log((1.0 + n) / (1.0 + df)) + 1.0
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    np.divide(X, norms, out=X, where=norms > 0)
    return X


def tfidf_similarity(query: str, problems: Sequence[str], max_features: int = 100) -> np.ndarray:
    """``f8[n]`` cosine of ``query`` to each of ``problems`` (the seed fits on problems + query, query last)."""
    if not problems:
        return np.zeros(0)
    X = tfidf_matrix(list(problems) + [query], max_features)
    return X[:-1] @ X[-1]
