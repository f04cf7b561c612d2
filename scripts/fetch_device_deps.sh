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

# The cuDNN frontend (header-only C++) for the cudnn backend: the pip wheel's include/, in
# .deps/cudnn-frontend/include where CMake looks (the GPU machine reaches no registry).
bash scripts/fetch_cudnn_frontend.sh
ls .deps/cudnn-frontend/include | head -3
