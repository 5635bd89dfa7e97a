#!/usr/bin/env bash
# tests/funclen.sh: no function of the library longer than 80 lines (the house style: a
# function a student reads in one screen). Every .c file of the Makefile's SRC_DIRS and
# train.c is read; a function is a definition starting at column 0 (its signature, perhaps
# over several lines, then a body opened by "{" at a line's end) and ending at the "}" in
# column 0; its length counts the lines from the signature's first to the closing brace.
# Each function over the limit prints a FAIL line with file:function and its length; the
# check also measures a planted 81-line function to show it is caught.
set -u
cd "$(dirname "$0")/.."
source tests/lib.sh
LIMIT=80

# lengths FILE...: "file:function lines" for every function definition in the files.
lengths() {
    awk '
    FNR == 1 { state = 0 }
    state == 0 && /^[A-Za-z_]/ && !/^(typedef|struct|enum|union)[ {]/ && /\(/ && !/^[^(]*=/ {
        sig = $0; start = FNR; state = 1
        name = sig; sub(/\(.*/, "", name); sub(/.*[ *]/, "", name)
    }
    state == 1 {
        if ($0 ~ /;[ \t]*(\/\/.*)?$/ && $0 !~ /\{/) { state = 0; next }   # a declaration
        if ($0 ~ /\{[ \t]*(\/\/.*)?$/) state = 2                              # the body opens
        else if ($0 ~ /\{.*\}[ \t;]*(\/\/.*)?$/) state = 0                    # a one-line function
        next
    }
    state == 2 && /^\}/ { print FILENAME ":" name " " FNR - start + 1; state = 0 }
    ' "$@"
}

srcs=$(for d in $(sed -n 's/^SRC_DIRS *:= *//p' Makefile); do ls $d/*.c; done; echo train.c)
all=$(lengths $srcs)
n=$(printf '%s\n' "$all" | grep -c .)
long=$(printf '%s\n' "$all" | awk -v L=$LIMIT '$2 > L')
check "$n functions measured in $(echo $srcs | wc -w) files (the library and train.c)" test "$n" -gt 500
if [ -z "$long" ]; then
    pass "no function over $LIMIT lines (longest: $(printf '%s\n' "$all" | sort -k2 -n | tail -1))"
else
    while read -r f len; do fail "$f is $len lines (over $LIMIT)"; done <<< "$long"
fi

# The measure must see a long function: plant one of 81 lines (signature, 79 body lines, "}").
T=$(mktemp -d /tmp/meshmoe-funclen.XXXXXX)
trap 'rm -rf "$T"' EXIT
{ echo 'static int planted(int a,'; echo '                   int b) {'
  for i in $(seq 77); do echo "    a += b * $i;"; done; echo '    return a;'; echo '}'; } > "$T/p.c"
got=$(lengths "$T/p.c")
check "a planted function of 81 lines is measured as such (got: ${got:-nothing})" test "$got" = "$T/p.c:planted 81"
summary
