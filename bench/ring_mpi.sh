#!/usr/bin/env sh
# Ring attention over MPI on one machine (make bench-mpi): at S = 16k, D = 64, H = 8, what the ring
# costs against one process. One process runs the whole sequence (1 rank, all cores, then 1 thread);
# the ring runs 2 and 4 ranks of 1 thread each (4 ranks oversubscribe a 2-core machine). For each:
# the slowest rank's time (the fastest of REPS, or their median with TIME=s); beside it the 1-thread process's time divided by the
# ranks (each rank a core of its own: the ideal the ring approaches across machines) and the
# process on all cores (the same cores as the ring here); the time the ranks spent computing and
# waiting in MPI, the same messages sent with nothing else to do, and the fraction hidden (of the
# messages, those already complete when the rank needed them). The load average is printed: on a
# shared machine every number moves with it.
#   BIN (build/ring_attention_mpi), MPIRUN (mpirun), MPI_RUN_FLAGS, S, H, D, REPS, CAUSAL ("1 0"),
#   THREADS (the one process's threads: all online cores) may be set in the environment.
set -eu
BIN=${BIN:-build/ring_attention_mpi}
MPIRUN=${MPIRUN:-mpirun}
MPI_RUN_FLAGS=${MPI_RUN_FLAGS:---allow-run-as-root --oversubscribe}
S=${S:-16384}; H=${H:-8}; D=${D:-64}; REPS=${REPS:-5}; CAUSAL=${CAUSAL:-"1 0"}
# TIME=min: the fastest of the reps (the least disturbed on a shared machine); TIME=s: the median
TIME=${TIME:-min}; T=$TIME; [ "$T" = min ] && T=min_s
THREADS=${THREADS:-$(getconf _NPROCESSORS_ONLN)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=${OMPI_MCA_plm:-isolated}

run() {   # ranks threads causal -> the RESULT line
    # shellcheck disable=SC2086
    $MPIRUN $MPI_RUN_FLAGS -np "$1" "$BIN" --S "$S" --H "$H" --D "$D" --threads "$2" --causal "$3" \
        --reps "$REPS" --no-check | grep '^RESULT'
}
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

echo "== ring attention over MPI: S=$S H=$H D=$D B=1 fp32, times: $( [ "$T" = s ] && echo median || echo fastest) of $REPS; $(getconf _NPROCESSORS_ONLN) cores;" \
     "$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: //')"
echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
echo
echo "| causal | ranks x threads | fwd s | bwd s | 1 process, 1 thread / ranks (fwd, bwd) | ring / that (fwd, bwd) | ring / 1 process on $THREADS threads (fwd, bwd) | compute s (fwd, bwd) | wait s (fwd, bwd) | messages alone s (fwd, bwd) | hidden (fwd, bwd) | MiB sent per rank (fwd, bwd) | load |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for c in $CAUSAL; do
    one=$(run 1 "$THREADS" "$c")
    fa=$(field "$one" fwd_$T); ba=$(field "$one" bwd_$T)
    printf '| %s | 1 x %s | %s | %s | - | - | 1, 1 | - | - | - | - | 0 | %s |\n' "$c" "$THREADS" "$fa" "$ba" \
        "$(cut -d' ' -f1 /proc/loadavg)"
    one1=$(run 1 1 "$c")
    f1=$(field "$one1" fwd_$T); b1=$(field "$one1" bwd_$T)
    printf '| %s | 1 x 1 | %s | %s | - | - | - | - | - | - | - | 0 | %s |\n' "$c" "$f1" "$b1" "$(cut -d' ' -f1 /proc/loadavg)"
    for n in 2 4; do
        r=$(run "$n" 1 "$c")
        awk -v c="$c" -v n="$n" -v f="$(field "$r" fwd_$T)" -v b="$(field "$r" bwd_$T)" -v f1="$f1" -v b1="$b1" \
            -v fa="$fa" -v ba="$ba" \
            -v cf="$(field "$r" compute_fwd_s)" -v cb="$(field "$r" compute_bwd_s)" \
            -v wf="$(field "$r" wait_fwd_s)" -v wb="$(field "$r" wait_bwd_s)" \
            -v mf="$(field "$r" comm_fwd_s)" -v mb="$(field "$r" comm_bwd_s)" \
            -v hf="$(field "$r" hidden_fwd)" -v hb="$(field "$r" hidden_bwd)" \
            -v sf="$(field "$r" sent_fwd_MiB)" -v sb="$(field "$r" sent_bwd_MiB)" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
            'BEGIN { printf "| %s | %s x 1 | %.3f | %.3f | %.3f, %.3f | %.2f, %.2f | %.2f, %.2f | %.3f, %.3f | %.3f, %.3f | %.3f, %.3f | %.0f%%, %.0f%% | %s, %s | %s |\n",
                     c, n, f, b, f1 / n, b1 / n, f / (f1 / n), b / (b1 / n), f / fa, b / ba, cf, cb, wf, wb, mf, mb,
                     100 * hf, 100 * hb, sf, sb, l }'
    done
done
echo
echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
