#!/bin/sh
# tests/contents.sh [flashattn.h] - the header's CONTENTS list (its >>tags, in the top doc block)
# and the tags that end its section banners (a line opening with /*) must name the same sections in the same order.
set -eu
h=${1:-flashattn.h}
listed=$(awk '/^   CONTENTS/{on=1; next} on && /^   [A-Z]+$/{exit} on' "$h" | grep -o '>>[a-z0-9_]*' | tr '\n' ' ')
marked=$(grep -E '^/\*.*>>[a-z][a-z0-9_]*( \*/)?$' "$h" | grep -oE '>>[a-z][a-z0-9_]*' | tr '\n' ' ')
if [ -z "$listed" ]; then echo "contents: no CONTENTS list with >>tags in $h"; exit 1; fi
if [ "$listed" != "$marked" ]; then
    echo "contents: the CONTENTS list and the section banners of $h disagree"
    echo "  listed: $listed"
    echo "  marked: $marked"
    exit 1
fi
echo "step-detail: $(echo "$listed" | wc -w) sections, listed and marked in the same order: $listed"
