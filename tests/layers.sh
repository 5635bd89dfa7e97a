#!/usr/bin/env bash
# tests/layers.sh: the include rule between folders (README.md#layers). Each folder sits on
# the ones before it in LAYERS; a file may include headers of its own folder and of the
# folders below it, never of one above (that would make a cycle possible). The check reads
# the #include lines of every source, prints the include graph between folders, and fails
# on an include that points up or into a folder the order does not know. It also plants an
# upward include in a copy of the tree and requires the check to catch it.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh

# Bottom to top; "." is train.c, the trainer's story, on top of everything. gpu/ (the GPU
# backend's twins of kernels/cpu/) sits beside kernels: it includes the kernels' headers.
LAYERS="core kernels gpu base data model sharding pipeline optim trainer report sweep ."

level_of() {   # level_of FOLDER: its place in LAYERS, or nothing
    local i=0 l
    for l in $LAYERS; do [ "$l" = "$1" ] && { echo $i; return; }; i=$((i + 1)); done
}
folder_of() {   # folder_of PATH: the top folder (kernels/cpu/x.c -> kernels), "." at the root
    case "$1" in */*) echo "${1%%/*}" ;; *) echo . ;; esac
}

# sources: the C, header and CUDA files under the current folder, but for tests/, build/ and
# the Python environments (not entered: make test may be filling one meanwhile).
sources() {
    find . \( -path ./tests -o -path ./build -o -path './.venv*' -o -path ./.git \) -prune -o \
        \( -name '*.[ch]' -o -name '*.cu' \) -print | sed 's|^\./||' | sort
}

# violations DIR: one line per include that breaks the rule, for the sources under DIR.
violations() {
    local dir=$1 f inc from to lf lt
    (cd "$dir" && sources) |
    while read -r f; do
        from=$(folder_of "$f"); lf=$(level_of "$from")
        [ -n "$lf" ] || { echo "$f: folder '$from' is not in the layer order (tests/layers.sh LAYERS)"; continue; }
        grep -o '^#include "[^"]*"' "$dir/$f" | cut -d'"' -f2 | while read -r inc; do
            to=$(folder_of "$inc"); lt=$(level_of "$to")
            if [ -z "$lt" ]; then echo "$f includes $inc: folder '$to' is not in the layer order"
            elif [ "$lt" -gt "$lf" ]; then echo "$f includes $inc: $from may not include from $to (above it)"
            fi
        done
    done
}

echo "== the include graph between folders (includes: from -> to)"
sources |
while read -r f; do
    grep -o '^#include "[^"]*"' "$f" | cut -d'"' -f2 | while read -r inc; do
        a=$(folder_of "$f"); b=$(folder_of "$inc"); [ "$a" != "$b" ] && echo "$a -> $b"
    done
done | sort | uniq -c | sed 's/^ */  /'

bad=$(violations .)
[ -n "$bad" ] && printf '  %s\n' "$bad"
check "every include points to the same folder or one below it ($LAYERS)" test -z "$bad"

# The check must catch an upward include: plant one in a copy of the sources.
T=$(mktemp -d /tmp/meshmoe-layers.XXXXXX)
trap 'rm -rf "$T"' EXIT
for d in $LAYERS; do [ "$d" = . ] || cp -r "$d" "$T/"; done
cp ./*.c "$T/" 2>/dev/null
echo '#include "sharding/fsdp.h"' >> "$T/base/memory.c"
planted=$(violations "$T" | grep 'base/memory.c includes sharding/fsdp.h')
check "a planted upward include is caught: ${planted:-(not caught)}" test -n "$planted"
echo '#include "base/memory.h"' >> "$T/gpu/sum.cu"   # .cu sources are read too
planted=$(violations "$T" | grep 'gpu/sum.cu includes base/memory.h')
check "a planted upward include in a .cu file is caught: ${planted:-(not caught)}" test -n "$planted"
summary
