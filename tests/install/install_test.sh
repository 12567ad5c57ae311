#!/usr/bin/env bash
# Installs the built project into a temporary prefix, then configures, builds and
# runs a downstream project that uses find_package(memento).
#   install_test.sh <memento build dir> <consumer source dir>
set -euo pipefail
build=$1
consumer=$2
work=$(mktemp -d)
# The consumer's node store outlives it by design; the test removes it.
trap 'rm -rf "$work"; rm -f /dev/shm/memento.install-$$.*' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$consumer" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCUDAToolkit_ROOT=/usr/local/cuda >/dev/null
cmake --build "$work/build" >/dev/null
"$work/build/consumer"
if [[ -x $work/build/torch_consumer ]]; then
  MEMENTO_JOB="install-$$" "$work/build/torch_consumer"
fi
