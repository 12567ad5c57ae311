# Sourced by the scripts that install torch: stop before pip does, naming the
# directory and the space it lacks, instead of pip's "No space left on device"
# part-way through a multi-gigabyte install.
#   require_space WHO PATH GB WHAT
# PATH need not exist yet (its nearest existing parent is measured).
# MEMENTO_SKIP_SPACE_CHECK=1 skips the check.
require_space() {
  local who=$1 path=$2 gb=$3 what=$4 asked=$2
  [[ -z ${MEMENTO_SKIP_SPACE_CHECK:-} ]] || return 0
  while [[ ! -e $path ]]; do path=$(dirname "$path"); done
  local free_kb
  free_kb=$(df -Pk "$path" | awk 'NR == 2 {print $4}')
  if ((free_kb < gb * 1024 * 1024)); then
    echo "$who: $what need about $gb GB free for $asked; its file system" \
      "($(df -Pk "$path" | awk 'NR == 2 {print $6}')) has $((free_kb / 1024)) MiB" \
      "(MEMENTO_SKIP_SPACE_CHECK=1 tries anyway)" >&2
    exit 1
  fi
}
