#!/usr/bin/env bash
# Fetches the Debian packages the GPU machine lacks (CLI11, nlohmann-json: headers; GoogleTest:
# a static library) into .deps/ (ignored by git, carried by the
# device tool). Run here, where apt reaches its registry.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
rm -f .deps/*.deb
(cd .deps && apt-get download libcli11-dev nlohmann-json3-dev libgtest-dev)
ls .deps

# The cuDNN frontend (header-only C++) for the cudnn backend: the pip wheel's include/.
rm -rf .deps/cudnn-frontend && mkdir -p .deps/cudnn-frontend
python3 -m pip download -q --no-deps -d .deps/cudnn-frontend nvidia-cudnn-frontend
(cd .deps/cudnn-frontend && python3 -m zipfile -e ./*.whl unpacked && mv unpacked/include . && rm -rf unpacked ./*.whl)
ls .deps/cudnn-frontend/include | head -3
