#!/usr/bin/env bash
# docs/generate.sh (make docs): regenerates the measured tables and the figures of the
# docs/ chapters from real runs.
#
# Tables: `./train sweep` once per tiny preset (few steps, short sequences, so that it
# takes minutes), then each chapter's rows of the sweep table written between the marker
# comments
#     <!-- sweep: PRESET -->  ...  <!-- /sweep: PRESET -->
# of that chapter. The rows of each chapter are listed below (the row numbers of
# docs/optimizations.md, the `#` column).
#
# Figures: SVGs in docs/figures/, drawn by `./train figure` (sweep/figure.c) from memory
# traces of one-step runs, from the program's own pipeline schedules and from the sweep's
# mesh-shape table; each written into its chapter between
#     <!-- figure: NAME -->  ...  <!-- /figure: NAME -->
# as an image link and a caption that says what was run.
#
# Keys: the table of every config key in docs/config.md, between
#     <!-- keys -->  ...  <!-- /keys -->
# as `./train --help-config --markdown` prints it (tests/docs.sh checks that they agree).
#
# Nothing between the markers is written by hand. Progress goes to stderr: each part as
# it starts and ends ([k/N]), and the sweeps' own row-by-row lines. DOCS_PARTS="keys
# tables figures" (the default) picks the parts; the mesh figures need the sweep outputs of
# build/docs/ (this run's, or an earlier one's). Exits non-zero if a sweep or a figure
# failed; the tables are written anyway, with the failure in them.
set -u
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-./train}
SETTINGS=${DOCS_SWEEP_SETTINGS:-"sweep_steps=3 max_target_length=64"}
PARTS=${DOCS_PARTS:-"keys tables figures"}
OUT=build/docs
FIG=docs/figures
mkdir -p $OUT $FIG
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

declare -A ROWS=(
    [sharding]="3 12 13 14 18 32 34"
    [rematerialisation-and-offload]="15 16 17 20 21 22 23 26"
    [temporaries-and-fused-ops]="2 4 5 6 11 19 24 28"
    [moe-dispatch]="7 10 30 35"
    [attention]="25 29 31"
    [pipeline]="8 9 33"
    [precision]="1 27 36 37"
)
PRESETS="mixtral-tiny deepseek-tiny"
REMAT="none minimal_with_context minimal save_dot_except_mlp save_qkv_proj save_out_proj full minimal_offloaded qkv_proj_offloaded"
FSDP="1 2 4 8"
ONE_STEP="steps=1 eval_steps=1 eval_interval=0 sample_length=0 max_target_length=64"

# ---- progress ----
STEPS=0
for part in $PARTS; do
    [ "$part" = keys ] && STEPS=$((STEPS + 1))
    [ "$part" = tables ] && STEPS=$((STEPS + 3))    # two sweeps, then the tables written
    [ "$part" = figures ] && STEPS=$((STEPS + 5))   # remat, fsdp, schedules, meshes, figures written
done
K=0
begin() { K=$((K + 1)); T_ITEM=$SECONDS; echo "make docs [$K/$STEPS] $* ..." >&2; }
end() {
    local t=$((SECONDS - T_ITEM)) e=$SECONDS
    echo "make docs [$K/$STEPS] done in ${t}s, elapsed $((e / 60))m$(printf %02d $((e % 60)))s" >&2
}
status=0
fail() { echo "make docs: $*" >&2; status=1; }

# replace FILE BEGIN END CONTENT_FILE: the lines between the marker lines BEGIN and END of
# FILE become CONTENT_FILE's. Fails (and leaves FILE alone) when a marker is missing.
replace() {
    local f=$1 b=$2 e=$3 content=$4
    grep -qxF -- "$b" "$f" && grep -qxF -- "$e" "$f" || { fail "$f has no '$b' ... '$e' markers"; return 1; }
    awk -v begin="$b" -v end="$e" -v tbl="$content" '
        $0 == begin { print; while ((getline line < tbl) > 0) print line; skip = 1; next }
        $0 == end { skip = 0 }
        !skip { print }
    ' "$f" > "$f.new" && mv "$f.new" "$f"
}

# ---- tables ----

# table PRESET "ROW ROW ...": the header and the chapter's lines of the preset's sweep, and
# the mesh-shape table when row 18 (the mesh-shape sweep) is among them.
table() {
    local preset=$1 rows=$2
    echo "Measured by \`make docs\`: \`./train sweep configs/$preset.yml $SETTINGS\`."
    echo
    awk -v rows=" $rows " '
        /^### Mesh shapes/ { if (index(rows, " 18 ")) { inmesh = 1; print "" } }
        inmesh && /^sweep:/ { inmesh = 0 }
        inmesh { print; next }
        /^\| # \|/ { print; header = 1; next }
        header && /^\|---/ { print; header = 0; next }
        /^\| [0-9]+ \|/ { split($0, f, " "); if (index(rows, " " f[2] " ")) print; next }
    ' $OUT/$preset.md
}

tables() {
    for preset in $PRESETS; do
        begin "the $preset sweep: ./train sweep configs/$preset.yml $SETTINGS"
        # The sweep's progress lines go to the terminal and to $OUT/$preset.err.
        if ! $TRAIN sweep configs/$preset.yml $SETTINGS > $OUT/$preset.md 2> >(tee $OUT/$preset.err >&2); then
            fail "the $preset sweep failed (its table says which row): $(tail -1 $OUT/$preset.md)"
        fi
        end
    done
    begin "the tables of ${#ROWS[@]} chapters"
    for chapter in "${!ROWS[@]}"; do
        f=docs/$chapter.md
        [ -f "$f" ] || { fail "$f is missing"; continue; }
        for preset in $PRESETS; do
            table $preset "${ROWS[$chapter]}" > $OUT/$chapter.$preset.table
            replace "$f" "<!-- sweep: $preset -->" "<!-- /sweep: $preset -->" $OUT/$chapter.$preset.table
        done
        echo "make docs: wrote the tables of $f" >&2
    done
    end
}

# ---- figures ----

# run NAME ARGS...: one training run, its output in $OUT/NAME.log; fails loudly.
run() {
    local name=$1; shift
    $TRAIN "$@" > $OUT/$name.log 2>&1 || { fail "'./train $*' failed: $(tail -1 $OUT/$name.log)"; return 1; }
}

# figure NAME CHAPTER ALT CAPTION: the image link and caption of docs/figures/NAME.svg
# written into the chapter between its figure markers.
figure() {
    local name=$1 chapter=$2 alt=$3 caption=$4
    [ -s $FIG/$name.svg ] || { fail "$FIG/$name.svg was not drawn"; return; }
    printf '![%s](figures/%s.svg)\n\n*%s*\n\n' "$alt" "$name" "$caption" > $OUT/$name.figure
    replace docs/$chapter.md "<!-- figure: $name -->" "<!-- /figure: $name -->" $OUT/$name.figure
}

figures() {
    begin "memory timelines of one step under ${REMAT// /, }"
    local panels=()
    for p in $REMAT; do
        run remat-$p configs/mixtral-tiny.yml remat_policy=$p $ONE_STEP memory_trace=$OUT/remat-$p.csv || continue
        # The trace holds device memory; the offloaded policies' host peak, as the run printed it.
        local host=$(grep -o 'host peak [0-9.]* [KMG]*i*B' $OUT/remat-$p.log | head -1)
        panels+=("remat_policy=$p${host:+, $host}" $OUT/remat-$p.csv)
    done
    $TRAIN figure timelines $FIG/remat-timelines.svg "mixtral-tiny, one device: one training step under each remat_policy" \
        "${panels[@]}" >&2 || fail "the remat timelines figure failed"
    end

    begin "FSDP peak per device on ${FSDP// /, } devices"
    local bars=()
    for n in $FSDP; do
        run fsdp$n configs/mixtral-tiny.yml ici_fsdp_parallelism=$n per_device_batch_size=$((8 / n)) $ONE_STEP \
            memory_trace=$OUT/fsdp$n.csv && bars+=("$([ $n = 1 ] && echo "1 device" || echo "fsdp=$n")" $OUT/fsdp$n.csv)
    done
    $TRAIN figure peaks $FIG/fsdp-peak.svg \
        "mixtral-tiny under FSDP: the per-device peak against the device count" \
        "${bars[@]}" >&2 || fail "the FSDP figure failed"
    end

    begin "pipeline schedules gpipe, 1f1b, circular"
    local pipe="configs/mixtral-tiny.yml ici_pipeline_parallelism=4 num_pipeline_microbatches=8 per_device_batch_size=2"
    local circ="configs/mixtral-tiny.yml base_num_decoder_layers=8 ici_pipeline_parallelism=4 num_layers_per_pipeline_stage=1 num_pipeline_microbatches=8 per_device_batch_size=2"
    $TRAIN figure schedule $FIG/pipeline-gpipe.svg $pipe >&2 || fail "the gpipe figure failed"
    $TRAIN figure schedule $FIG/pipeline-1f1b.svg $pipe pipeline_schedule=1f1b >&2 || fail "the 1f1b figure failed"
    $TRAIN figure schedule $FIG/pipeline-circular.svg $circ >&2 || fail "the circular figure failed"
    end

    begin "mesh-shape sweeps as bars"
    for preset in $PRESETS; do
        [ -s $OUT/$preset.md ] || { fail "$OUT/$preset.md is missing: run the tables part first"; continue; }
        $TRAIN figure meshes $FIG/meshes-$preset.svg "$preset: every factorisation of 4 devices (row 18)" \
            $OUT/$preset.md >&2 || fail "the $preset mesh figure failed"
    done
    end

    begin "the figures into their chapters"
    figure remat-timelines rematerialisation-and-offload "Memory timelines under each remat_policy" \
        "Figure: live bytes by tag over one training step of mixtral-tiny on one device under each \`remat_policy\` (the same byte scale in every panel; the offloaded policies' host memory is not drawn, its peak is in the panel's title). The runs use the tables' sequence length, so each peak can be read against the table's bytes for that policy. Drawn by \`make docs\` from \`./train configs/mixtral-tiny.yml remat_policy=P $ONE_STEP memory_trace=...\` and \`./train figure timelines\`."
    figure fsdp-peak sharding "FSDP peak per device against the number of devices" \
        "Figure: the per-device peak of mixtral-tiny under FSDP on 1, 2, 4 and 8 devices, each bar the bytes live at the peak by tag (the global batch stays 8 sequences, of the tables' length: fsdp=2 and fsdp=4 are the table's rows). Drawn by \`make docs\` from \`./train configs/mixtral-tiny.yml ici_fsdp_parallelism=N per_device_batch_size=8/N $ONE_STEP memory_trace=...\` and \`./train figure peaks\`."
    for preset in $PRESETS; do
        figure meshes-$preset sharding "The $preset mesh-shape sweep as bars" \
            "Figure: the $preset table above as bars: each mesh's per-device peak and each tag's own peak (left), and the bytes all devices sent per step (right). Drawn by \`make docs\` from the sweep's output with \`./train figure meshes\`."
    done
    figure pipeline-gpipe pipeline "The gpipe schedule" \
        "Figure: \`./train figure schedule pipeline-gpipe.svg $pipe\`: the gpipe schedule the trainer runs (pipeline/schedule.c:build_gpipe), every forward, the head, then every backward."
    figure pipeline-1f1b pipeline "The 1f1b schedule" \
        "Figure: the same with \`pipeline_schedule=1f1b\` (pipeline/schedule.c:build_1f1b): as many idle ticks, but a stage holds at most P - s microbatches at once."
    figure pipeline-circular pipeline "The circular schedule" \
        "Figure: \`./train figure schedule pipeline-circular.svg $circ\`: two repeats (a circular pipeline); the bubble falls to (P-1)/(R*M+P-1)."
    end
}

# ---- keys ----

keys() {
    begin "the key table of docs/config.md"
    $TRAIN --help-config --markdown > $OUT/keys.md && replace docs/config.md "<!-- keys -->" "<!-- /keys -->" $OUT/keys.md ||
        fail "the key table of docs/config.md was not written"
    end
}

for part in $PARTS; do
    case $part in
        keys) keys ;;
        tables) tables ;;
        figures) figures ;;
        *) fail "DOCS_PARTS: '$part' is not 'keys', 'tables' or 'figures'" ;;
    esac
done
exit $status
