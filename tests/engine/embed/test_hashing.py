"""Hashing embedder, caching base and [embed] config."""

import numpy as np
import pytest

from engine.config import from_dict
from engine.embed import EmbedConfig, Embedder, HashingEmbedder, embedder_from_table, make_embedder
from engine.embed.base import CachedEmbedder, l2_normalise
from engine.errors import BackendError, ConfigError, InputError


def test_unit_norm_float32_and_deterministic():
    texts = ["The cat sat on the mat", "", "!!!", "ünïcödé wörds", "a" * 5000]
    a = HashingEmbedder(128).embed(texts)
    b = HashingEmbedder(128).embed(texts)
    assert a.dtype == np.float32 and a.shape == (5, 128)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(a, b)


def test_lexical_similarity_ordering():
    e = HashingEmbedder(384)
    v = e.embed(["the cat sat on the mat", "The cat sat on a mat", "quarterly revenue fell sharply"])
    assert v[0] @ v[1] > 0.6 > 0.2 > abs(v[0] @ v[2])


def test_seed_and_dim_change_vectors():
    t = ["some text here"]
    assert not np.allclose(HashingEmbedder(64, seed=0).embed(t), HashingEmbedder(64, seed=1).embed(t))
    assert HashingEmbedder(32).embed(t).shape == (1, 32)


def test_cache_dedups_and_batches():
    e = HashingEmbedder(64, batch_size=2)
    out = e.embed(["a", "b", "a", "c", "b"])
    assert e.embedded == 3 and e.calls == 2
    np.testing.assert_array_equal(out[0], out[2])
    e.embed(["a", "c"])
    assert e.embedded == 3  # all cached
    assert e.embed([]).shape == (0, 64)


def test_cache_is_bounded():
    e = HashingEmbedder(16, cache_size=2)
    e.embed(["x", "y", "z"])
    assert len(e._cache) == 2


def test_protocol():
    assert isinstance(HashingEmbedder(8), Embedder)


@pytest.mark.parametrize("bad,match", [("one string", "single str"), ([1, "a"], r"texts\[0\] must be a str"), (5, "sequence of strings")])
def test_bad_texts(bad, match):
    with pytest.raises(InputError, match=match):
        HashingEmbedder(8).embed(bad)


@pytest.mark.parametrize(
    "kw,match",
    [({"dim": 0}, "dim must be > 0"), ({"word_ngrams": 0}, "word_ngrams"), ({"char_ngram_range": (4, 2)}, "char_ngram_range"),
     ({"char_weight": 2.0}, "char_weight"), ({"batch_size": 0}, "batch_size")],
)
def test_bad_hashing_args(kw, match):
    with pytest.raises(InputError, match=match):
        HashingEmbedder(**{"dim": 8, **kw})


class _Broken(CachedEmbedder):
    def __init__(self, out):
        super().__init__(dim=4)
        self.name, self.out = "broken", out

    def _embed_batch(self, texts):
        return self.out


@pytest.mark.parametrize(
    "out,match",
    [(np.ones((1, 3)), r"returned shape \(1, 3\)"), (np.full((1, 4), np.nan), "NaN"), (np.zeros((1, 4)), "zero norm")],
)
def test_backend_output_is_checked(out, match):
    with pytest.raises(BackendError, match=match):
        _Broken(out).embed(["x"])


def test_l2_normalise_rejects():
    with pytest.raises(InputError, match="2-D"):
        l2_normalise(np.ones(3))
    np.testing.assert_allclose(np.linalg.norm(l2_normalise(np.array([[3.0, 4.0]])), axis=1), 1.0)


def test_config_from_table():
    e = embedder_from_table({"backend": "hashing", "dim": 96, "seed": 3})
    assert isinstance(e, HashingEmbedder) and e.dim == 96 and e.seed == 3
    assert make_embedder(EmbedConfig()).dim == 384


@pytest.mark.parametrize(
    "table,match",
    [({"backend": "bert"}, "embed.backend must be one of"), ({"dim": -1}, "embed.dim must be >= 0"),
     ({"backend": "minilm", "dim": 128}, "384"), ({"backend": "openai"}, "embed.model"),
     ({"backend": "openai", "model": "m", "base_url": "ftp://x"}, "base_url"), ({"nope": 1}, "unknown key")],
)
def test_config_errors(table, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(EmbedConfig, table, "embed")


@pytest.mark.parametrize("table, match", [
    ({"backend": "minilm", "runtime": "onnx"}, "embed.runtime must be one of 'numpy', 'torch'"),
    ({"backend": "minilm", "device": "cuda"}, "embed.device = 'cuda' needs embed.runtime = 'torch'"),
])
def test_minilm_runtime_config_errors(table, match):
    from engine.embed import embedder_from_table
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match=match):
        embedder_from_table(table)


def test_safetensors_reader_rejects_a_truncated_file(tmp_path):
    from engine.embed.bert_numpy import read_safetensors
    from engine.errors import BackendError

    p = tmp_path / "bad.safetensors"
    p.write_bytes((1000).to_bytes(8, "little") + b"{}")
    with pytest.raises(BackendError, match="header length 1000 does not fit a 10-byte file"):
        read_safetensors(p)


def test_embedders_of_the_same_settings_share_one_cache_and_pickle_without_it():
    """A text's vector depends only on the settings, so each process keeps one cache per settings: each run's
    method pickled to a Ray worker carries no cache, and its copy there uses the worker's."""
    import pickle

    from engine.embed import EmbedConfig, make_embedder

    emb = make_embedder(EmbedConfig(backend="hashing"))
    v = emb.embed(["kept in the cache"] + [f"text {i}" for i in range(500)])[:1]
    blob = pickle.dumps(emb)
    assert len(blob) < 2_000  # 500 cached vectors of 384 floats stay behind
    copy = pickle.loads(blob)
    assert copy._cache is emb._cache
    before = copy.embedded
    np.testing.assert_array_equal(copy.embed(["kept in the cache"]), v)
    assert copy.embedded == before  # a hit in the shared cache
    assert HashingEmbedder(seed=1)._cache is not emb._cache  # other settings, other vectors: another cache
