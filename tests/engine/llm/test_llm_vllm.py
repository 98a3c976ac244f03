"""In-process vLLM, for real (opt-in: pytest -m vllm; needs vllm and a converted model folder).

The model folder comes from ``TOE_VLLM_MODEL`` (default /work/vllm-model/smollm2-135m,
made with scripts/llm_gguf_to_hf.py). See docs/llm.md for the CPU check.
"""

import os

import pytest

pytestmark = pytest.mark.vllm

MODEL = os.environ.get("TOE_VLLM_MODEL", "/work/vllm-model/smollm2-135m")


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("vllm")
    if not os.path.isdir(MODEL):
        pytest.skip(f"no model folder at {MODEL} (set TOE_VLLM_MODEL)")
    from engine.llm.vllm_backend import VLLMBackend

    return VLLMBackend(MODEL, seed=0, max_model_len=1024, dtype="float32", enforce_eager=True)


def test_vllm_batch_with_n(backend):
    from engine.game24 import prompts as P
    from engine.llm.base import Request

    out = backend.generate([
        Request(prompt=P.propose_prompt("4 9 10 13"), n=2, max_tokens=8, seed=1),
        Request(messages=[{"role": "user", "content": "Name a color."}], max_tokens=6, temperature=0.0),
    ])
    assert [len(r.completions) for r in out] == [2, 1]
    assert all(r.backend == "vllm" and r.prompt_tokens > 0 for r in out)
    assert all(0 < c.completion_tokens <= 8 for r in out for c in r.completions)
    again = backend.generate([Request(messages=[{"role": "user", "content": "Name a color."}], max_tokens=6,
                                      temperature=0.0)])
    assert again[0].texts == out[1].texts
