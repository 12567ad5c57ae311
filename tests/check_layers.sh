#!/usr/bin/env bash
# Fails when a file of runtime/src includes a header of a higher layer. The
# folders, lowest first (runtime/CMakeLists.txt):
#   config store transport snapshot protect persist recovery engine injob
# A file may include its own folder's headers and those of lower folders.
# Usage: check_layers.sh RUNTIME_SRC_DIR
set -euo pipefail
src=$1
layers=(config store transport snapshot protect persist recovery engine injob)
rank() { local i; for i in "${!layers[@]}"; do [[ ${layers[$i]} == "$1" ]] && { echo "$i"; return; }; done; echo -1; }
bad=0
checked=0
for dir in "${layers[@]}"; do
  own=$(rank "$dir")
  for file in "$src/$dir"/*; do
    checked=$((checked + 1))
    while IFS= read -r included; do
      r=$(rank "$included")
      if ((r > own)); then
        echo "$dir/$(basename "$file") includes a header of $included/, a higher layer"
        bad=1
      fi
    done < <(sed -n 's|^#include "\([a-z_]*\)/.*|\1|p' "$file")
  done
done
((checked > 10)) || { echo "only $checked files under $src: wrong folder?"; exit 1; }
((bad == 0)) || exit 1
echo "$checked files of runtime/src include no higher layer"
