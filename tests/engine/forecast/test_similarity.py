import numpy as np
import pytest

from engine.errors import InputError
from engine.forecast.seed_tools import seed_tool_sources
from engine.forecast.similarity import (
    ast_similarity, average_linkage_clusters, cluster_ratio, code_tokens, sequence_similarity, similarity_matrix,
    token_jaccard,
)

A = "def f(x):\n    # comment\n    return x + 1\n"
B = "def g(y):\n    return y + 1\n"


def test_token_jaccard_by_hand():
    assert code_tokens(A) == ["def", "f", "(", "x", ")", ":", "return", "x", "+", "1"]
    ta, tb = set(code_tokens(A)), set(code_tokens(B))
    assert token_jaccard(A, B) == pytest.approx(len(ta & tb) / len(ta | tb))
    assert token_jaccard(A, A) == 1.0 and sequence_similarity(A, A) == 1.0
    assert ast_similarity(A, B) == 1.0  # same structure, different names


def test_average_linkage_by_hand():
    sim = np.array([[1, .9, .1, .1], [.9, 1, .2, .0], [.1, .2, 1, .6], [.1, .0, .6, 1]])
    labels = average_linkage_clusters(sim, 0.5)
    assert labels[0] == labels[1] and labels[2] == labels[3] and labels[0] != labels[2]
    assert len(set(average_linkage_clusters(sim, 0.05).tolist())) == 1  # avg(.1,.1,.2,0)=.1 >= .05
    with pytest.raises(InputError, match="square"):
        average_linkage_clusters(np.ones((2, 3)))


def test_cluster_ratio_on_seed_tools():
    srcs = list(seed_tool_sources().values())
    s = similarity_matrix(srcs, "ast_sequence")
    assert s.shape == (4, 4) and np.allclose(s, s.T)
    r = cluster_ratio(srcs + [srcs[0]], "token_jaccard", 0.5)
    assert 0 < r < 1  # the duplicate joins its original
    with pytest.raises(InputError, match="metric must be one of"):
        similarity_matrix(srcs, "cosine")


def test_guide_archetypes_follow_the_e2_definitions():
    from engine.forecast.guides_report import ARCHETYPES, archetype

    writer = {"function": {"parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                                          "required": ["text"]}}}
    g = lambda prompt, *tools: {"guide_name": "g", "prompt": prompt, "tool_names": list(tools)}  # noqa: E731
    assert archetype(g("Read, clean and write.", "tool_read", "tool_clean", "tool_write_final"), {}) == ARCHETYPES[0]
    assert archetype(g("Extract, then synthesise.", "tool_extract_to_cache", "tool_save"),
                     {"tool_save": writer}) == ARCHETYPES[1]
    assert archetype(g("Join both.", "tool_spec_extractor", "tool_content_extractor", "tool_save"),
                     {"tool_save": writer}) == ARCHETYPES[2]
    assert archetype(g("Plan the queries, then validate and rank the evidence.", "tool_read", "tool_write"),
                     {}) == ARCHETYPES[3]
