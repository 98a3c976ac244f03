"""Serve the embedded model (llama.cpp through xllamacpp) over HTTP on 127.0.0.1 until killed.

Prints ``URL http://127.0.0.1:PORT/v1`` once the model is loaded; point the
``openai`` backend at it (``llm.openai.base_url``). Used by tests/engine/llm.

    python scripts/llm_serve_local.py [--model PATH.gguf] [--parallel 4] [--threads 2]
"""

import argparse
import signal
import sys
import threading

from engine.llm.local_backend import LocalLlamaBackend


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=1024)
    args = ap.parse_args(argv)
    backend = LocalLlamaBackend(args.model, threads=args.threads, parallel=args.parallel, context=args.context)
    print(f"URL {backend.base_url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
