#!/usr/bin/env bash
# scripts/lib/space.sh: a directory whose file system lacks the space stops the
# script with a message naming the directory, the need and what is free; one
# that has it, or MEMENTO_SKIP_SPACE_CHECK, lets it go on.
set -uo pipefail
source "$1/scripts/lib/space.sh"
fail() { echo "check_space: $*" >&2; exit 1; }
missing=$(mktemp -d)/not/yet/made
# More than any disk here: refused, by name.
out=$( (require_space probe "$missing" 1000000 "the probe's files") 2>&1) && fail "not refused"
[[ $out == *"probe: the probe's files need about 1000000 GB free for $missing"* ]] ||
  fail "message does not name the need and the path: $out"
[[ $out =~ has\ [0-9]+\ MiB ]] || fail "message does not say what is free: $out"
# Nothing needed: passes, silently.
out=$( (require_space probe "$missing" 0 "nothing") 2>&1) || fail "refused 0 GB: $out"
[[ -z $out ]] || fail "printed on success: $out"
# The override.
MEMENTO_SKIP_SPACE_CHECK=1 require_space probe "$missing" 1000000 x || fail "override ignored"
echo "check_space: ok"
