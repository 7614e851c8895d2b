#!/usr/bin/env bash
# tests/readme_snippets.sh OUTDIR 'CC' 'CXX' ['CLANG'] - compiles every ```c block of README.md as
# C99 -pedantic and as C++, each -Wall -Wextra -Werror (with clang and clang++ too when CLANG is
# given), so that what the README shows is what compiles.
#
# A block that has an #include is a translation unit and is compiled as it stands (-c: it need not
# have a main). A block without one is a fragment of statements that continues the Quickstart: it is
# compiled inside a function that declares what the Quickstart has in scope (fa_params p, q, k, v, o).
# Each file starts with a #line directive, so that a diagnostic names README.md and its line.
set -euo pipefail
out=$1 cc=$2 cxx=$3 clang=${4:-}
warn="-Wall -Wextra -Werror -Wmissing-field-initializers"
mkdir -p "$out"
rm -f "$out"/snippet_*.c
awk -v out="$out" '
  /^```c[ \t]*$/ { n++; f = sprintf("%s/snippet_%02d.c", out, n); inb = 1; line = NR; next }
  inb && /^```/  { inb = 0; close(f); next }
  inb            { if (!started[n]++) printf "#line %d \"README.md\"\n", line + 1 > f; print > f }
' README.md
count=0
for f in "$out"/snippet_*.c; do
  [ -e "$f" ] || { echo "no \`\`\`c block found in README.md"; exit 1; }
  if grep -q '^[[:space:]]*#[[:space:]]*include' "$f"; then
    src=$f kind="translation unit"
  else
    src=${f%.c}_wrapped.c kind="fragment"
    id=$(basename "${f%.c}")
    {
      echo '#include "flashattn.h"'
      echo "int readme_$id(const float *q, const float *k, const float *v, float *o);"
      echo "int readme_$id(const float *q, const float *k, const float *v, float *o)"
      echo '{'
      echo '    fa_params p = FA_PARAMS_INIT;'
      cat "$f"
      echo '    (void)p; (void)q; (void)k; (void)v; (void)o;'
      echo '    return 0;'
      echo '}'
    } > "$src"
  fi
  what="README.md line $(sed -n '1s/^#line \([0-9]*\).*/\1/p' "$f"), $kind"
  $cc -std=c99 -pedantic $warn -I. -c "$src" -o "$out/c.o"
  $cxx -x c++ -pedantic $warn -I. -c "$src" -o "$out/cxx.o"
  tools="$cc C99, $cxx C++"
  if [ -n "$clang" ]; then
    $clang -std=c99 -pedantic $warn -I. -c "$src" -o "$out/clang.o"
    $clang -x c++ -pedantic $warn -I. -c "$src" -o "$out/clangxx.o"
    tools="$tools, clang C99 and C++"
  fi
  echo "ok: $what ($tools)"
  count=$((count + 1))
done
echo "step-detail: $count blocks, each by $cc and $cxx${clang:+ and by clang as C and C++}"
