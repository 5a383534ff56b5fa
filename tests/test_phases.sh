#!/usr/bin/env bash
# `cosmos3 gen --json` phases on the CPU with the demo model: the "phases"
# object has every phase, none negative, and they add up (the steps, the
# decode and the write inside the request; the request and the load inside
# the process's total; launch to the first step after the load); the text
# output has its one "phases:" line; the shard prefault (COSMOS3_PREFAULT=0
# turns it off) and the threaded frame write (COSMOS3_WRITE_THREADS=1: one
# writer) leave every output byte as it was.
set -u
bin=${COSMOS3_BIN:?}
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
export TMPDIR=$tmp
command -v jq >/dev/null || { echo "SKIP: jq not installed (.ci/setup, or: apt-get install jq)"; exit 77; }
P="a red circle on a blue background, on the right"
G=(gen -p "$P" --device cpu -m demo)

# an image, JSON
"$bin" "${G[@]}" --seed 3 -s 6 -o a.png --json >j 2>err
rc=$?
[ $rc = 0 ] && ok || bad "gen --json exited $rc: $(cat err)"
jq -e .phases j >/dev/null && ok || bad "gen --json has no phases: $(cat j)"
jq -c .phases j
# every phase present and a number >= 0
for k in load.total load.read load.backends load.weights load.vae load.tokenizer load.prefault_bytes \
         tokenize und cond_encode steps.total steps.count steps.first steps.mean steps.rest_mean steps.host_mean \
         decode other encode write generate start launch_to_first_step total; do
    jq -e ".phases.$k | type == \"number\" and . >= 0" j >/dev/null && ok || bad "phases.$k missing or negative: $(jq -c .phases j)"
done
# they add up (1 ms of slack for the clocks' rounding)
jq -e '.phases as $p | 1e-3 as $e |
    $p.steps.count == 6 and $p.steps.first > 0 and $p.steps.mean > 0 and
    ($p.steps.mean * $p.steps.count <= $p.steps.total + $e) and ($p.steps.host_mean < $p.steps.mean) and
    ((($p.steps.first + 5 * $p.steps.rest_mean) / 6 - $p.steps.mean) | fabs) < $e and
    ($p.steps.total + $p.decode + $p.write <= $p.generate + $e) and
    ($p.tokenize + $p.und + $p.cond_encode + $p.steps.total + $p.decode + $p.other + $p.write <= $p.generate + $e) and
    ($p.encode <= $p.write + $e) and
    ($p.load.weights + $p.load.vae + $p.load.backends <= $p.load.total + $e) and
    ($p.load.read <= $p.load.total + $e) and ($p.load.tokenizer <= $p.load.total + $e) and
    ($p.load.total + $p.start <= $p.launch_to_first_step + $e) and
    ($p.launch_to_first_step <= $p.total) and ($p.load.total + $p.generate <= $p.total + $e) and
    $p.load.prefault_bytes > 0 and $p.decode > 0 and $p.load.total > 0' j >/dev/null \
    && ok || bad "the phases do not add up: $(jq -c .phases j)"
# the older seconds object says the same
jq -e '(.seconds.denoise == .phases.steps.total) and (.seconds.vae == .phases.decode) and
       (.seconds.total == .phases.generate) and (.seconds.write == .phases.write)' j >/dev/null \
    && ok || bad "seconds and phases disagree: $(jq -c '{seconds, phases}' j)"

# the text output: one phases line after the 'wrote' line
"$bin" "${G[@]}" --seed 3 -s 6 -o b.png 2>err
rc=$?
[ $rc = 0 ] && ok || bad "gen exited $rc: $(cat err)"
grep -qE '^phases: load [0-9.]+ \(read [0-9.]+, backends [0-9.]+, weights [0-9.]+, vae [0-9.]+, tokenizer [0-9.]+\), tokenize [0-9.]+, und [0-9.]+, steps [0-9.]+ \(6: first [0-9.]+, mean [0-9.]+, rest [0-9.]+\), decode [0-9.]+, write [0-9.]+ \(encode [0-9.]+\), generate [0-9.]+, launch to first step [0-9.]+, total [0-9.]+ s$' err \
    && ok || bad "no phases line: $(cat err)"
[ "$(grep -c '^phases:' err)" = 1 ] && ok || bad "not one phases line: $(cat err)"
"$bin" "${G[@]}" --seed 3 -s 6 -o q.png -q 2>err
grep -q '^phases:' err && bad "-q printed the phases: $(cat err)" || ok

# no prefault: the same picture, and the JSON says nothing was prefaulted
COSMOS3_PREFAULT=0 "$bin" "${G[@]}" --seed 3 -s 6 -o c.png --json >j0 2>err
rc=$?
[ $rc = 0 ] && ok || bad "COSMOS3_PREFAULT=0 gen exited $rc: $(cat err)"
jq -e '.phases.load.prefault_bytes == 0' j0 >/dev/null && ok || bad "COSMOS3_PREFAULT=0 still prefaulted: $(jq -c .phases.load j0)"
cmp -s a.png c.png && ok || bad "the picture differs without the prefault"

# a video as frames: the write on threads and on one writer give the same files
"$bin" "${G[@]}" --seed 4 -s 2 --frames 9 -o v4/ --json >jv 2>err
rc=$?
[ $rc = 0 ] && ok || bad "video gen exited $rc: $(cat err)"
COSMOS3_WRITE_THREADS=1 "$bin" "${G[@]}" --seed 4 -s 2 --frames 9 -o v1/ --json >jv1 2>err
rc=$?
[ $rc = 0 ] && ok || bad "video gen, one writer, exited $rc: $(cat err)"
[ "$(ls v4 | wc -l)" = 9 ] && [ "$(ls v1 | wc -l)" = 9 ] && ok || bad "frames written: $(ls v4 | wc -l) and $(ls v1 | wc -l)"
same=1
for f in v1/*.png; do cmp -s "$f" "v4/${f#v1/}" || same=0; done
[ $same = 1 ] && ok || bad "frames written on threads differ from one writer's"
jq -e '.phases.write > 0 and .phases.encode == 0 and .phases.steps.count == 2' jv >/dev/null \
    && ok || bad "video phases: $(jq -c .phases jv)"

finish phases
