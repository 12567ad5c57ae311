#!/usr/bin/env bash
# Fails when a registered test has none of the labels the suite runs by
# (unit, local, mpi, fault, python): such a test would never run under -L.
# Usage: check_labels.sh BUILD_DIR
set -euo pipefail
build=$1
unlabelled=$(ctest --test-dir "$build" -N -LE '^(unit|local|mpi|fault|python)$' | sed -n 's/^ *Test *#[0-9]*: //p')
total=$(ctest --test-dir "$build" -N | sed -n 's/^Total Tests: //p')
if [[ -n "$unlabelled" ]]; then
  echo "tests without a label (add LABELS, or register the target with memento_add_gtest):"
  echo "$unlabelled"
  exit 1
fi
if [[ "${total:-0}" -lt 2 ]]; then
  echo "ctest lists $total tests in $build: discovery failed?"
  exit 1
fi
echo "every one of $total tests has a label"
