#!/bin/sh
# bench/ab/run.sh OUTDIR [BASE] - builds OUTDIR/ab: fa_tiled of git revision BASE's flashattn.h (A,
# default main) and of the working tree's (B), each a private FLASHATTN_STATIC copy in one program
# (no BLAS), whose calls alternate A, B, A, B on the same data. Then: OUTDIR/ab THREADS
# [prefill|small|decode|mods|all] [max S]; AB_SECS (default 6) bounds each shape's time.
set -e
D=$(cd "$(dirname "$0")" && pwd); R=$(cd "$D/../.." && pwd); O=$1; BASE=${2:-main}
mkdir -p "$O/A"
git -C "$R" show "$BASE:flashattn.h" > "$O/A/flashattn.h"
${CC:-cc} -O2 -std=c99 -DFLASHATTN_NO_BLAS -DSIDE=side_a -I"$O/A" -I"$D" -c "$D/side.c" -o "$O/a.o"
${CC:-cc} -O2 -std=c99 -DFLASHATTN_NO_BLAS -DSIDE=side_b -I"$R" -I"$D" -c "$D/side.c" -o "$O/b.o"
${CC:-cc} -O2 -std=c99 -I"$D" -I"$R/bench" "$D/ab.c" "$O/a.o" "$O/b.o" -o "$O/ab" -lm -lpthread
