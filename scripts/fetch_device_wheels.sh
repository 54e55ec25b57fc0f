#!/usr/bin/env bash
# Fetch the wheels PTXBench needs on a GPU machine that has PyTorch but no internet and no pydantic
# (the lent H200s run Python 3.12). They land in .whl/ (git-ignored); on the GPU machine run
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/src
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl pydantic==2.13.4 pydantic-core==2.46.4 annotated-types typing-inspection typing-extensions pyelftools
ls .whl
