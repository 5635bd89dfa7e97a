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

# sources: the C, header and CUDA files under the current folder, but for tests/, build/ and
# the Python environments (not entered: make test may be filling one meanwhile).
sources() {
    find . \( -path ./tests -o -path ./build -o -path './.venv*' -o -path ./.git \) -prune -o \
        \( -name '*.[ch]' -o -name '*.cu' \) -print | sed 's|^\./||' | sort
}

# includes DIR: "FILE INCLUDED" for each #include "..." line of the sources under DIR (one
# grep over all of them, and awk below: a loop in bash took seconds in forks).
includes() {
    (cd "$1" && sources | xargs grep -H -o '^#include "[^"]*"' /dev/null) | sed 's|:#include "| |; s|"$||'
}

# violations DIR: one line per include that breaks the rule, for the sources under DIR. A
# file's folder is its path's first part ("." for a file at the root).
violations() {
    includes "$1" | awk -v layers="$LAYERS" '
        function folder(p) { return index(p, "/") ? substr(p, 1, index(p, "/") - 1) : "." }
        BEGIN { n = split(layers, l, " "); for (i = 1; i <= n; i++) level[l[i]] = i }
        {
            from = folder($1); to = folder($2)
            if (!(from in level)) { if (!(($1) in said)) print $1 ": folder \x27" from "\x27 is not in the layer order (tests/layers.sh LAYERS)"; said[$1] = 1; next }
            if (!(to in level)) print $1 " includes " $2 ": folder \x27" to "\x27 is not in the layer order"
            else if (level[to] > level[from]) print $1 " includes " $2 ": " from " may not include from " to " (above it)"
        }'
}

echo "== the include graph between folders (includes: from -> to)"
includes . | awk '
    function folder(p) { return index(p, "/") ? substr(p, 1, index(p, "/") - 1) : "." }
    { a = folder($1); b = folder($2); if (a != b) print a " -> " b }' | sort | uniq -c | sed 's/^ */  /'

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
