#!/usr/bin/env bash
# A new user's first hour (issue 36): what can be checked before the model
# loads is refused before it loads (timed against a load made slow on
# purpose), messages that say what is wrong, help that matches the program,
# did-you-mean for mistyped options and commands.
set -u
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"

# --- checks before the model loads ------------------------------------------
# COSMOS3_TEST_LOAD_DELAY makes gen's load take 4 s more: a refusal that
# comes after the load takes longer than that; one before it, well under 1 s.
delay=4
now() { date +%s.%N; }
# refused_fast CODE SUBSTRING -- ARGS...: expect(), and in under 1 s
# The bound is 1 s; on a machine so busy that the program's bare start
# (`--version`, timed just before) takes over 0.5 s, twice that start, and
# never more than half the delay. A slow refusal is timed once more.
bound() {
    local t0 t1
    t0=$(now); "$bin" --version > /dev/null; t1=$(now)
    awk -v a="$t0" -v b="$t1" -v d=$delay 'BEGIN { x = 2 * (b - a); x = x < 1 ? 1 : x; print (x > d / 2 ? d / 2 : x) }'
}
refused_fast() {
    local t0 t1 try lim
    for try in 1 2; do
        lim=$(bound)
        t0=$(now)
        COSMOS3_TEST_LOAD_DELAY=$delay expect "$@"
        t1=$(now)
        awk -v a="$t0" -v b="$t1" -v l="$lim" 'BEGIN { exit !(b - a < l) }' && break
    done
    if awk -v a="$t0" -v b="$t1" -v l="$lim" 'BEGIN { exit !(b - a < l) }'; then ok; else
        bad "cosmos3 ${*:4}: refused after $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s (the load takes $delay s): not before the load"
    fi
}
# the delay is real: a good run takes at least that long
t0=$(now)
COSMOS3_TEST_LOAD_DELAY=$delay expect 0 "" -- gen -p "a red circle on a blue background" -o slow.png -q
t1=$(now)
awk -v a="$t0" -v b="$t1" -v d=$delay 'BEGIN { exit !(b - a >= d) }' && ok || bad "COSMOS3_TEST_LOAD_DELAY did not slow the load"

printf 'not a picture\n' > notimg.png
"$bin" gen -p "a red circle on a blue background" -o a.png -q 2>/dev/null
refused_fast 5 "the folder newdir does not exist; make it (mkdir -p newdir)" -- gen -p x -o newdir/x.png
refused_fast 5 "the folder no/such does not exist" -- gen -p x --frames 5 -o no/such/clip.mp4
[ ! -e newdir ] && [ ! -e no ] && ok || bad "a refused output made a folder"
refused_fast 4 "--image nothere.png: No such file or directory" -- gen -p x --image nothere.png --frames 5
refused_fast 4 "--video nothere.mp4: No such file or directory" -- gen -p x --video nothere.mp4 --frames 9
refused_fast 4 "--video nothere/%04d.png: no frame matches" -- gen -p x --video 'nothere/%04d.png' --frames 9
refused_fast 4 "--noise /nonexistent/lat.safetensors: No such file" -- gen -p x --noise /nonexistent/lat.safetensors
refused_fast 4 "--first-last nothere.png: No such file" -- gen -p x --first-last a.png nothere.png --frames 9
refused_fast 4 "notimg.png is not a picture or clip" -- gen -p x --image notimg.png --frames 5
refused_fast 2 "the prompt is empty" -- gen -p "" -o e.png
refused_fast 2 "the prompt is empty" -- gen -p "   " -o e.png
# -o - on a terminal (script gives the command a pty)
if command -v script >/dev/null; then
    t0=$(now)
    COSMOS3_TEST_LOAD_DELAY=$delay script -qec "$bin gen -p x -o -" /dev/null > tty.out 2>&1
    rc=$?
    t1=$(now)
    [ "$rc" = 2 ] && grep -q "standard output is a terminal" tty.out && ok || bad "-o - on a terminal: exit $rc: $(cat tty.out)"
    awk -v a="$t0" -v b="$t1" -v l="$(bound)" 'BEGIN { exit !(b - a < l) }' && ok || bad "-o - on a terminal refused after the load"
fi
# the REPL: the destination at `set output`, and its own -o at start, before the load
printf 'set output nodir/x.png\nquit\n' | "$bin" > repl.out 2> repl.err
grep -q "the folder nodir does not exist" repl.err && ok || bad "REPL set output to a missing folder: $(cat repl.err)"
"$bin" -o nodir/x.png < /dev/null > repl2.out 2> repl2.err
rc=$?
[ "$rc" = 5 ] && ! grep -q loaded repl2.err && ok || bad "REPL -o nodir/x.png: exit $rc, $(cat repl2.err)"

# --- messages that say what is wrong ----------------------------------------
expect 2 "--width 32768 is larger than 16384" -- gen -p x -W 32768
expect 2 "--height 16400 is larger than 16384" -- gen -p x -H 16400
expect 2 "multiple of 16 (e.g. 96)" -- gen -p x -W 100
expect 2 "1 + 4k (e.g. 81)" -- gen -p x --frames 80
expect 4 "--first-last nothere.png" -- gen -p x --first-last a.png nothere.png --frames 9
grep -q -- "--video" "$tmp/err" && bad "--first-last's missing file blamed --video: $(cat "$tmp/err")" || ok
# --from a run made with --noise, from another folder: the stored noise is found beside it
mkdir -p made && (cd made && "$bin" gen -p "a red circle on a blue background" --seed 4 -q -o a.png --save-latents lat.safetensors >/dev/null 2>&1 &&
    "$bin" gen -p "a red circle on a blue background" --noise lat.safetensors -q -o nz.png >/dev/null 2>&1)
expect 0 "" -- gen --from made/nz.png -o nz2.png
same_pixels made/nz.png nz2.png && ok || bad "--from another folder did not reuse the stored noise"
grep -q "^wrote nz2.png (" "$tmp/err" && ! grep -q "seed [0-9]" "$tmp/err" && ok ||
    bad "--from a --noise picture names a seed that was not used: $(cat "$tmp/err")"
# --help's first example draws with the built-in model, no unknown words
expect 0 "" -- --help
ex=$(sed -n 's/^  cosmos3 gen -p "\([^"]*\)".*/\1/p' "$tmp/out" | head -1)
[ -n "$ex" ] && ok || bad "--help has no gen example"
expect 0 "" -- gen -p "$ex" -o ex.png
grep -q "does not know" "$tmp/err" && bad "--help's first example has words the demo does not know: $(cat "$tmp/err")" || ok

# --- help and man pages match the program ------------------------------------
expect 2 "did you mean --steps?" -- gen -p x --stpes 5
expect 2 "did you mean 'gen'?" -- gn -p x
expect 2 "did you mean 'gen'?" -- help gn
expect 2 "did you mean --tensor-parallel-size?" -- gen -p x --tensor-paralel-size 2
expect 0 "" -- gen -p "a red circle on a blue background" --device cpu -qo qo.png
[ -s qo.png ] && [ ! -s "$tmp/err" ] && ok || bad "-qo FILE did not bundle -q and -o: $(cat "$tmp/err")"
expect 0 "" -- help gen
grep -E -- '--image FILE .*JPEG' "$tmp/out" | grep -q WebP && ok || bad "help gen: --image does not name JPEG and WebP"
grep -E -- '--video FILE\|DIR .*MP4' "$tmp/out" | grep -q WebM && ok || bad "help gen: --video does not name MP4 and WebM"
grep -q "rng.h" "$tmp/out" && bad "help gen points at a source file" || ok
# every option's help starts in one column (or on the next line, after a long name)
awk 'NR > 4 && /^  / && index(substr($0, 7), "  ") { if (substr($0, 35, 1) != " " || substr($0, 36, 1) == " ") { print; n++ } } END { exit n > 0 }' "$tmp/out" && ok ||
    bad "help gen: lines out of the column: $(awk 'NR > 4 && /^  / && index(substr($0, 7), "  ") && (substr($0, 35, 1) != " " || substr($0, 36, 1) == " ")' "$tmp/out" | head -3)"
expect 0 "" -- help repl
grep -E -- '--preview HOW' "$tmp/out" | grep -q "sixel or blocks" && ok || bad "help repl: --preview HOW lists no values"
expect 0 "" -- help serve
grep -q "/v1/videos" "$tmp/out" && ok || bad "help serve does not name /v1/videos"
expect 0 "" -- info
grep -q "schedule linear" "$tmp/out" && grep -q "karras sigmas" "$tmp/out" && bad "info: karras sigmas beside schedule linear" || ok
expect 0 "" -- bench --preset tiny -W 32 -H 32 --steps 1 --skip-vae --device cpu
grep -q "MFU [0-9]" "$tmp/out" && bad "CPU bench reports an MFU against a GPU's peak: $(grep MFU "$tmp/out")" || ok
if command -v mandoc >/dev/null; then
    mandoc -Tutf8 "$COSMOS3_SRCDIR/man/cosmos3.1" 2>/dev/null | col -bx > page.txt
    grep -q "one word that is no command" page.txt && ! grep -q "clear, " page.txt && ok || bad "man: the REPL's one-word example is garbled: $(grep -n 'one word' page.txt)"
fi

finish first_hour
