#!/usr/bin/env bash
# tests/docs.sh: the documentation points at things that exist. Every markdown link and
# every `docs/NAME.md#section` cited from code, scripts or docs names a file of the
# repository and a heading in it; every `file.c:function` (or .h, .cu) that the docs cite names a
# function defined in that file; no doc cites code by line number; every key of the
# sweep's table (trainer/rows.c) has its section in docs/optimizations.md; the key table of
# docs/config.md is what ./train --help-config --markdown prints; and every ./train command of
# the course's exercises runs as its text says (the two checks that need the build).
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh

# slugs FILE: the anchors of FILE's headings, one a line, as GitHub makes them (lower case,
# punctuation other than '-' and '_' dropped, spaces as '-').
slugs() {
    awk '/^```/ { code = !code } !code && /^#+ / {
        h = tolower($0); sub(/^#+ +/, "", h); gsub(/[^a-z0-9_ -]/, "", h); gsub(/ /, "-", h); print h }' "$1"
}
# has_anchor FILE ANCHOR: FILE exists and has a heading whose anchor is ANCHOR.
has_anchor() { [ -f "$1" ] && slugs "$1" | grep -qxF -- "$2"; }

FILES=$(git ls-files 2>/dev/null || find . -type f -not -path './.git/*' -not -path './build/*' | sed 's|^\./||')
MD=$(printf '%s\n' "$FILES" | grep '\.md$')

# 1. Markdown links between the repository's files: ](path) and ](path#anchor).
bad=(); n=0
for f in $MD; do
    dir=$(dirname "$f")
    while IFS= read -r target; do
        n=$((n + 1))
        path=${target%%#*}; anchor=; [ "$path" != "$target" ] && anchor=${target#*#}
        [ -z "$path" ] && path=$(basename "$f")
        full=$dir/$path
        if [ ! -e "$full" ]; then bad+=("$f -> $target (no such file)"); continue; fi
        if [ -n "$anchor" ] && ! has_anchor "$full" "$anchor"; then bad+=("$f -> $target (no such heading)"); fi
    done < <(grep -oE '\]\([^) ]+\)' "$f" | sed 's/^](//; s/)$//' | grep -vE '^(https?|mailto):')
done
check "$n markdown links lead to a file of the repository (and a heading in it): ${bad[*]:-all do}" [ $n -gt 0 -a ${#bad[@]} -eq 0 ]

# 2. docs/NAME.md#anchor cited anywhere (comments, scripts, docs).
bad=(); n=0
while IFS=: read -r f doc anchor; do
    n=$((n + 1))
    has_anchor "$doc" "$anchor" || bad+=("$f cites $doc#$anchor")
done < <(printf '%s\n' "$FILES" | grep -vE '\.(bin|png|svg|safetensors)$' | xargs grep -oE 'docs/[a-z_-]+\.md#[A-Za-z0-9_-]+' 2>/dev/null |
         sed -E 's/^([^:]*):(docs\/[a-z_-]+\.md)#(.*)$/\1:\2:\3/')
check "$n citations of docs/NAME.md#section name a heading that exists: ${bad[*]:-all do}" [ $n -gt 0 -a ${#bad[@]} -eq 0 ]

# 3. Code cited as file:function in the docs (C and CUDA files): the function is defined (or
# declared) in the file. A list after the citation on the same line ("f.c:a, b and c") names
# functions of the same file; of its further names, those with an underscore are checked
# (a plain word there may be prose).
cited_functions() {
    grep -vh '^|' "$@" |
        grep -oE '\b[a-z_0-9]+(/[a-z_0-9]+)*\.(c|h|cu):[a-z_][a-z_0-9]*((,| and|, and| /| or|, or) [a-z_][a-z_0-9]*_[a-z_0-9]*)*' |
        while read -r m; do
            for fn in $(printf '%s\n' "${m#*:}" | sed -E 's/(,|\band\b|\bor\b|\/)/ /g'); do echo "${m%%:*}:$fn"; done
        done
}
DOCS="README.md $(printf '%s\n' $MD | grep '^docs/')"
bad=(); n=0
while IFS=: read -r src fn; do
    n=$((n + 1))
    [ -f "$src" ] && grep -qE "^[^ /#].*\b$fn\(" "$src" || bad+=("$src:$fn")
done < <(cited_functions $DOCS | sort -u)
check "$n file:function citations in README.md and docs/ name a function of that file: ${bad[*]:-all do}" [ $n -gt 0 -a ${#bad[@]} -eq 0 ]

# 4. No citation by line number in the docs (outside the measured tables).
lines=$(grep -nHE '\.(c|h|cu):[0-9]+|\blines? [0-9]+' $DOCS | grep -vE '^[^:]+:[0-9]+:\|' || true)
check "README.md and docs/ cite code by function, not by line number${lines:+: $lines}" [ -z "$lines" ]

# 5. Every key of the sweep's table has its section in the catalog.
missing=(); n=0
for key in $(grep -oE '^    \{"[0-9]+", "[a-z0-9_]+"' trainer/rows.c | sed -E 's/.*"([a-z0-9_]+)"$/\1/' | sort -u); do
    n=$((n + 1))
    [ "$key" = mesh ] && key=mesh-shape-sweep
    has_anchor docs/optimizations.md "$key" || missing+=("$key")
done
check "every key of trainer/rows.c ($n) has a section in docs/optimizations.md: ${missing[*]:-all do}" \
    [ $n -gt 0 -a ${#missing[@]} -eq 0 ]

# exercises FILE...: the ./train commands of each file's "## Exercises" section, a line each:
# FILE, "refused" where the text goes on to say the trainer refuses it (else "runs"), COMMAND.
exercises() {
    python3 - "$@" <<'PY'
import re, sys
for f in sys.argv[1:]:
    text = open(f).read()
    at = text.find("\n## Exercises")
    if at < 0: continue
    section = text[at + 1:].split("\n## ")[0]   # to the next section, or the end
    flat = re.sub(r"\s+", " ", section)
    for m in re.finditer(r"`(\./train [^`]*)`", flat):
        refused = "refuses" in flat[m.end():m.end() + 80]
        print(f"{f}\t{'refused' if refused else 'runs'}\t{m.group(1)}")
PY
}

# 6. The key table of docs/config.md, from base/config_keys.def through the binary.
TRAIN=${TRAIN:-./train}
written=$(awk '$0 == "<!-- /keys -->" { on = 0 } on { print } $0 == "<!-- keys -->" { on = 1 }' docs/config.md)
printed=$($TRAIN --help-config --markdown 2>&1)
first=$(diff <(printf '%s\n' "$written") <(printf '%s\n' "$printed") | grep -m2 '^[<>]' | cut -c1-160 | tr '\n' ' ')
check "docs/config.md's key table is what $TRAIN --help-config --markdown prints (DOCS_PARTS=keys make docs rewrites it)${first:+: $first}" \
    [ -n "$printed" -a "$written" = "$printed" ]

# 7. Every ./train command the course's exercises give runs as the text says: status 0, or
# where the text says the trainer refuses it, one "meshmoe:" message and status 1. Their
# /tmp/ paths go to a scratch folder (a _IMPL placeholder: one of its values, ppermute).
EX=$(mktemp -d /tmp/meshmoe-exercises.XXXXXX)
bad=(); n=0
while IFS=$'\t' read -r f want cmd; do
    n=$((n + 1))
    cmd=${cmd//\/tmp\//$EX/}; cmd=${cmd//_IMPL/_ppermute}; cmd=${cmd/#.\/train/$TRAIN}
    out=$(timeout 120 bash -c "$cmd" 2>&1 < /dev/null); rc=$?
    msgs=$(printf '%s\n' "$out" | grep -c '^meshmoe: ' || true)
    case $want in
    runs) [ $rc -eq 0 ] || bad+=("$f: '$cmd' exited $rc: $(printf '%s\n' "$out" | grep 'meshmoe:' | tail -1)") ;;
    refused) [ $rc -eq 1 ] && [ "$msgs" -eq 1 ] || bad+=("$f: '$cmd' should be refused with one message: exit $rc, $msgs") ;;
    esac
done < <(exercises $(printf '%s\n' $MD | grep '^docs/'))
rm -rf "$EX"
check "the course's $n exercise commands run as their text says (or are refused where it says so): ${bad[*]:-all do}" \
    [ $n -gt 0 -a ${#bad[@]} -eq 0 ]

summary
