#!/usr/bin/env bash
# docs/generate.sh (make docs): regenerates the measured tables of the docs/ chapters from
# real runs. It runs `./train sweep` once per tiny preset (few steps, short sequences, so
# that it takes minutes), then writes each chapter's rows of the sweep table between the
# marker comments
#     <!-- sweep: PRESET -->  ...  <!-- /sweep: PRESET -->
# of that chapter. Nothing in between the markers is written by hand. The rows of each
# chapter are listed below (the row numbers of docs/optimizations.md, the `#` column). Exits non-zero if a
# sweep failed (a "bit" row not bit-identical, or a run that failed); the tables are
# written anyway, with the failure in them.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train}
SETTINGS=${DOCS_SWEEP_SETTINGS:-"sweep_steps=3 max_target_length=64"}
OUT=build/docs
mkdir -p $OUT

declare -A ROWS=(
    [sharding]="3 12 13 14 18 32 34"
    [rematerialisation-and-offload]="15 16 17 20 21 22 23 26"
    [temporaries-and-fused-ops]="2 4 5 6 11 19 24 28"
    [moe-dispatch]="7 10 30"
    [attention]="25 29 31"
    [pipeline]="8 9 33"
    [precision]="1 27"
)

status=0
for preset in mixtral-tiny deepseek-tiny; do
    echo "make docs: ./train sweep configs/$preset.yml $SETTINGS"
    if ! $TRAIN sweep configs/$preset.yml $SETTINGS > $OUT/$preset.md 2> $OUT/$preset.err; then
        echo "make docs: the $preset sweep failed (its table says which row): $(tail -1 $OUT/$preset.md)"
        status=1
    fi
done

# table PRESET "ROW ROW ...": the header and the chapter's lines of the preset's sweep, and
# the mesh-shape table when row 18 (the mesh-shape sweep) is among them.
table() {
    local preset=$1 rows=$2
    echo "Measured by \`make docs\`: \`./train sweep configs/$preset.yml $SETTINGS\`."
    echo
    awk -v rows=" $rows " '
        /^### Row 18/ { if (index(rows, " 18 ")) { inmesh = 1; print "" } }
        inmesh && /^sweep:/ { inmesh = 0 }
        inmesh { print; next }
        /^\| # \|/ { print; header = 1; next }
        header && /^\|---/ { print; header = 0; next }
        /^\| [0-9]+ \|/ { split($0, f, " "); if (index(rows, " " f[2] " ")) print; next }
    ' $OUT/$preset.md
}

for chapter in "${!ROWS[@]}"; do
    f=docs/$chapter.md
    [ -f "$f" ] || { echo "make docs: $f is missing"; status=1; continue; }
    for preset in mixtral-tiny deepseek-tiny; do
        table $preset "${ROWS[$chapter]}" > $OUT/$chapter.$preset.table
        awk -v begin="<!-- sweep: $preset -->" -v end="<!-- /sweep: $preset -->" -v tbl="$OUT/$chapter.$preset.table" '
            $0 == begin { print; while ((getline line < tbl) > 0) print line; skip = 1; next }
            $0 == end { skip = 0 }
            !skip { print }
        ' "$f" > "$f.new" && mv "$f.new" "$f"
    done
    echo "make docs: wrote the tables of $f"
done
exit $status
