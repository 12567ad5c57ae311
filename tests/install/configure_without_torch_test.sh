#!/usr/bin/env bash
# What `pip install .` meets under pip's build isolation (a fresh environment
# without torch): the configure must stop at once and say why and what to run,
# not fail later in find_package(Torch REQUIRED). torch is hidden from the
# interpreter by a package of that name that refuses to import.
#   configure_without_torch_test.sh SOURCE_DIR PYTHON
set -euo pipefail
src=$1
python=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/shadow/torch"
echo 'raise ImportError("torch hidden by the test")' > "$tmp/shadow/torch/__init__.py"
set +e
out=$(PYTHONPATH="$tmp/shadow" cmake -S "$src" -B "$tmp/build" -DMEMENTO_WITH_TORCH=ON \
  -DMEMENTO_WITH_PYTHON=ON -DMEMENTO_BUILD_TESTS=OFF -DMEMENTO_BUILD_EXPERIMENTS=OFF \
  -DPython_EXECUTABLE="$python" 2>&1)
rc=$?
set -e
if [ "$rc" -eq 0 ]; then
  echo "FAIL: configured with MEMENTO_WITH_TORCH=ON and no importable torch"
  exit 1
fi
for want in "MEMENTO_WITH_TORCH is ON but torch was not found" "$python cannot import torch" \
            "pip install --no-build-isolation ."; do
  if ! grep -qF -- "$want" <<<"$(tr -s ' \n' ' ' <<<"$out")"; then
    echo "$out"
    echo "FAIL: the error does not say: $want"
    exit 1
  fi
done
echo "PASS: no torch: the configure stops naming the interpreter and --no-build-isolation"
