#!/usr/bin/env bash
# Fetches the cuDNN frontend headers (header-only C++; the include/ of PyPI's
# nvidia-cudnn-frontend wheel) into .deps/cudnn-frontend/include, where CMake looks for them
# (VISATTN_CUDNN_FRONTEND_DIR). `make deps` runs this where nvcc exists; the GPU machine gets the
# headers by carrying .deps. Does nothing when they are already there. Never fails the build: without
# the headers CMake builds everything but the cudnn backend, and says so.
set -uo pipefail
cd "$(dirname "$0")/.."
VERSION=1.32.0  # the frontend the backend is written and checked against (docs/dev/cudnn-research.md)
dest=.deps/cudnn-frontend
IFS=. read -r major minor _ <<< "$VERSION"
if grep -q "CUDNN_FRONTEND_MAJOR_VERSION $major\$" "$dest/include/cudnn_frontend_version.h" 2>/dev/null &&
   grep -q "CUDNN_FRONTEND_MINOR_VERSION $minor\$" "$dest/include/cudnn_frontend_version.h"; then
  exit 0  # already there
fi
python=$(command -v python3 || true)
if [ -z "$python" ]; then echo "fetch_cudnn_frontend: no python3; the cudnn backend will not be built"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$python" -m pip download -q --no-deps -d "$tmp" "nvidia-cudnn-frontend==$VERSION"; then
  echo "fetch_cudnn_frontend: could not download nvidia-cudnn-frontend==$VERSION; the cudnn backend will not be built"
  exit 0
fi
(cd "$tmp" && "$python" -m zipfile -e ./*.whl unpacked) || exit 0
rm -rf "$dest" && mkdir -p "$dest" && mv "$tmp/unpacked/include" "$dest/"
echo "fetch_cudnn_frontend: cuDNN frontend $VERSION headers in $dest/include"
