#!/usr/bin/env bash
# check_layers.sh SRCDIR — the folders' include graph points one way (README "Layout",
# docs/engine.md): every `#include "folder/file.h"` in a source folder must name a folder of a
# lower layer (or its own). Prints each offending line and exits 1; prints the graph on success.
set -euo pipefail
src="${1:-.}"
cd "$src"
# Layer of each source folder, bottom (0) to top; a folder may include only lower ones.
declare -A layer=(
    [base]=0
    [config]=1 [kernels]=1
    [kernels/cpu]=2 [optim]=2 [shard]=2
    [kernels/cuda]=3
    [engine]=4
    [ckpt]=5
    [models]=6
    [models/cuda]=7
    [tools]=8
)
bad=0
declare -A edges=()
for dir in "${!layer[@]}"; do
    for f in "$dir"/*.c "$dir"/*.h "$dir"/*.cu "$dir"/*.cuh; do
        [ -e "$f" ] || continue
        while IFS= read -r line; do
            inc="${line#*\"}"
            inc="${inc%%\"*}"
            target="$(dirname "$inc")"
            [ "$target" = "." ] && continue                 # zinc.h, system-style local headers
            [ "$target" = "$dir" ] && continue
            if [ -z "${layer[$target]+x}" ]; then
                echo "layers: $f includes $inc from '$target', a folder with no layer" >&2
                bad=1
                continue
            fi
            edges["$dir -> $target"]=1
            if [ "${layer[$target]}" -ge "${layer[$dir]}" ]; then
                echo "layers: $f (layer ${layer[$dir]}) includes $inc (layer ${layer[$target]}): not below" >&2
                bad=1
            fi
        done < <(grep -h '^#include "[a-z_]*/' "$f" || true)
    done
done
if [ "$bad" -ne 0 ]; then
    echo "layers: FAIL — a folder includes one at its own layer or above (see README, Layout)" >&2
    exit 1
fi
printf '%s\n' "${!edges[@]}" | sort
echo "layers: ok, ${#edges[@]} folder edges, all pointing down"
