#!/usr/bin/env bash
# The cosmos3 > prompt with the built-in demo model on the CPU:
#   1. through a pipe: set/show/seed/neg, a generation, last/plan/gpus/help,
#      the script's exit status (the last failure), `cosmos3` alone; typos of
#      commands and one-word lines ask "did you mean" and generate nothing;
#      the OpenMP wait policy the process runs with (passive unless set);
#   2. through tmux (send-keys / capture-pane): tab completion of commands,
#      option names and values and paths, a generation with the preview,
#      the history file, Ctrl-C cancelling a long run while the model stays
#      loaded, another generation, Ctrl-C at the empty prompt staying (as in
#      bash), Ctrl-D leaving.
set -u
bin=${COSMOS3_BIN:?}
unset COSMOS3_MODEL
model=demo
sock="c3repl$$"
cleanup() { tmux -L "$sock" kill-server 2>/dev/null; tmux -L "${sock}b" kill-server 2>/dev/null; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
export XDG_STATE_HOME="$tmp/state"
has() { grep -qE -- "$2" "$1" && ok || bad "$3: '$2' not in: $(head -c 1500 "$1")"; }

# ------------------------------------------------------------------ pipe
cat > script <<'EOF'
help
set width 32
set height 32
set steps 2
set schedule karras
show schedule
show width
seed 7
neg blurry, dark
set output shot-%02d.png
a red fox in the snow
"help me" is a prompt, not a command
last
plan
gpus
help set
history
EOF
"$bin" repl -m "$model" < script > out 2> err
rc=$?
[ $rc = 0 ] && ok || bad "script exit $rc, want 0: $(cat err)"
has out '^schedule = karras$' "set/show"
has out '^width = 32$' "show width"
has out '^seed = 7$' "seed"
has out '^negative prompt = blurry, dark$' "neg"
has out '^wrote shot-00.png \(seed 7, ' "generation with an output pattern"
has out '^wrote shot-01.png \(seed 7, ' "a quoted line starting with a command word is a prompt"
has out '^seed 7, 32x32, 1 frame, 2 steps, guidance 4, shift 3, schedule karras' "last: settings"
has out '^seconds: tokenize [0-9.]+, und [0-9.]+, denoise [0-9.]+ \([0-9.]+ s/step: cond [0-9.]+, uncond [0-9.]+\)' "last: timings"
has out '^layout: tp 1 x cfg-parallel 1 x ulysses 1 = 1 rank on cpu' "plan"
has out 'weights [0-9.]+ [KMG]iB, K/V' "gpus: our accounting"
has out '^(cpu|GPU 0): ' "gpus: the device"
has out 'schedule +sigma schedule' "help set lists the options"
has out "A line is a prompt unless its first word is a command" "help states the prompt rule"
[ -f shot-00.png ] && [ -f shot-01.png ] && ok || bad "PNGs not written: $(ls)"
[ ! -e "$tmp/state/cosmos3/history" ] && ok || bad "a script must not write the interactive history"
"$bin" meta shot-00.png > meta 2>&1
has meta 'negative_prompt: blurry, dark' "neg reached the image"
has meta 'schedule: karras' "set schedule reached the image"

# image FILE / video FILE set the conditioning of the next prompts, clear drops it;
# a prompt that starts with the word and names no file is refused before any run
# (the tiny fixture model: the demo model ships no VAE encoder)
fx=${COSMOS3_FIXTURES:-}
cin="$fx/tiny-a/cond/inputs"
if [ ! -f "$fx/tiny-a/model/model_index.json" ]; then
    echo "SKIP (part): image/video/clear need the fixtures (COSMOS3_FIXTURES)"
else
cat > script <<EOF
set width 64
set height 64
set frames 9
set steps 2
image of a cat
image $cin/i2v_picture_96x72.png
set output i2v
a cat
last
video $cin/v2v_clip_64_%02d.png
set output v2v
a clip
clear
clear
set output plain
a dog
EOF
"$bin" repl -m "$fx/tiny-a/model" < script > out 2> err
rc=$?
[ $rc = 4 ] && ok || bad "conditioning script exit $rc, want 4 (the refused 'image of a cat'): $(cat err)"
has err "image: --image of a cat: No such file or directory \(a prompt that starts with 'image': quote it\)" "image of a missing file"
[ "$(grep -c '^cosmos3: image' err)" = 1 ] && ok || bad "conditioning script: errors: $(cat err)"
has out '^image = .*/i2v_picture_96x72.png \(96x72\)' "image FILE"
has out '^conditioned on the picture .*/i2v_picture_96x72.png' "last names the picture"
has out '^video = .*/v2v_clip_64_%02d.png \(64x64, 13 frames\)' "video FILE"
has out '^conditioning cleared' "clear"
has out '^no conditioning to clear' "clear again"
"$bin" meta --json i2v/frame_0000.png > meta 2>&1
has meta 'i2v_picture_96x72.png' "the picture reached the run"
"$bin" meta --json v2v/frame_0000.png > meta 2>&1
has meta 'v2v_clip_64_%02d.png' "the clip reached the run"
"$bin" meta --json plain/frame_0000.png > meta 2>&1
has meta '"prompt":"a dog"' "the run after clear"
grep -q '"condition"' meta && bad "clear: the run after it is still conditioned: $(cat meta)" || ok
fi

# typos and one-word lines: a suggestion, no generation, exit status 2
printf 'set output typo-%%d.png\nsunset\nsett steps 4\n?\nhlep\nshwo width\n' | "$bin" repl -m "$model" > out 2> err
rc=$?
[ $rc = 2 ] && ok || bad "typos: exit $rc, want 2"
has err "'sunset' is not a command \('help' lists them\); a one-word prompt needs quotes: \"sunset\"" "one word"
has err "'sett' is not a command; did you mean 'set steps 4'\?" "a typo of set"
has err "'\?' is not a command; did you mean 'help'\?" "? means help"
has err "'hlep' is not a command; did you mean 'help'\?" "a transposition"
has err "'shwo' is not a command; did you mean 'show width'\?" "a typo of show"
ls typo-*.png > /dev/null 2>&1 && bad "a typo generated: $(ls typo-*.png)" || ok
# a quoted word and a line of several words are prompts
printf 'set width 32\nset height 32\nset steps 1\nseed 2\nset output q-%%d.png\n"red"\na red circle\n' |
    "$bin" repl -m "$model" > out 2> err
rc=$?
[ $rc = 0 ] && [ -f q-0.png ] && [ -f q-1.png ] && ok || bad "quoted one-word prompt: exit $rc: $(cat err) $(ls)"

# the OpenMP wait policy in the REPL process: passive (no spinning) unless the user chose
policy() { OMP_DISPLAY_ENV=verbose "$@" "$bin" repl -m "$model" < /dev/null 2>&1 | sed -n "s/.*GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | tail -1; }
[ "$(policy env)" = 0 ] && ok || bad "the REPL runs with GOMP_SPINCOUNT $(policy env), want 0 (passive)"
[ "$(policy env OMP_WAIT_POLICY=active)" != 0 ] && ok || bad "OMP_WAIT_POLICY=active was overridden"

# a failing line: the script goes on, the exit status is the last failure
printf 'set steps nope\nset width 32\nset height 32\nset steps 1\nshow steps\nset bogus 1\nshow steps\n' |
    "$bin" repl -m "$model" > out 2> err
rc=$?
[ $rc = 2 ] && ok || bad "script with bad lines: exit $rc, want 2"
has err "--steps: 'nope' is not an integer" "bad value message"
has err "unknown option 'bogus'" "unknown option message"
has out '^steps = 1$' "lines after a failure still run"
# --negative is --negative-prompt's alias (tokenize's --negative flag is another row)
printf 'set negative blurry\nshow negative\n' | "$bin" repl -m "$model" > out 2> err
[ $? = 0 ] && ok || bad "set negative: $(cat err)"
has out '^negative-prompt = blurry$' "set negative sets the negative prompt"
printf 'seed 5\nquit\nseed 6\n' | "$bin" repl -m "$model" > out 2> err
[ $? = 0 ] && ok || bad "quit: exit status"
grep -q 'seed = 6' out && bad "lines after quit ran" || ok
# no model: a script stops with the checkpoint error (3)
printf 'show steps\n' | "$bin" repl -m "$tmp/nowhere" > out 2> err
rc=$?
[ $rc = 3 ] && ok || bad "missing model: exit $rc, want 3: $(cat err)"
# `cosmos3` alone is the REPL (model from $COSMOS3_MODEL)
printf 'show width\nset width 48\nshow width\n' | COSMOS3_MODEL="$model" "$bin" > out 2> err
rc=$?
[ $rc = 0 ] && grep -q '^width = 48$' out && ok || bad "cosmos3 alone: exit $rc: $(cat out err)"

# ------------------------------------------------------------------ tmux
no_rl=0
"$bin" tui < /dev/null 2>&1 | grep -q "built without ncurses and readline" && no_rl=1
if ! command -v tmux > /dev/null || [ $no_rl = 1 ]; then
    echo "tmux not installed or built without readline: interactive part skipped"
    finish repl
    exit
fi
. "${COSMOS3_SRCDIR:?}/tests/tmux_screen.sh"
screen() { t capture-pane -p -J -S -200 > "$tmp/screen"; }

mkdir -p "$tmp/dirs/models_here"
t new-session -d -x 150 -y 50 -c "$tmp" \
    "env LANG=C.UTF-8 XDG_STATE_HOME='$tmp/state' '$bin' -m '$model' -W 32 -H 32 --steps 2 --preview blocks; echo EXIT=\$?; sleep 60"
expect_screen '^cosmos3 > ' "the prompt"
# completion: a command, an option name, an enum value, a path after load
t send-keys 'sh' Tab
expect_screen '^cosmos3 > show $' "Tab completes a command" 5
t send-keys C-u 'set sche' Tab
expect_screen '^cosmos3 > set schedule $' "Tab completes an option name" 5
t send-keys 'kar' Tab
expect_screen '^cosmos3 > set schedule karras $' "Tab completes an option value" 5
t send-keys Enter
expect_screen '^schedule = karras$' "set through tmux"
t send-keys 'load dirs/mod' Tab
expect_screen '^cosmos3 > load dirs/models_here/$' "Tab completes a path after load" 5
t send-keys C-u 'show schedule' Enter
expect_screen '^schedule = karras$' "show through tmux"
t send-keys 'seed 11' Enter 'a lighthouse at dusk' Enter
expect_screen '^wrote cosmos3-11.png \(seed 11, ' "a generation through tmux"
screen
grep -q $'\xe2\x96\x80' "$tmp/screen" && ok || bad "no half-block preview on screen"
[ -f cosmos3-11.png ] && ok || bad "cosmos3-11.png not written"
# a long run, cancelled with one Ctrl-C: the model stays loaded
t send-keys 'set width 512' Enter 'set height 512' Enter 'set steps 400' Enter 'seed 12' Enter 'a long run' Enter
expect_screen 'step [0-9]+/400' "progress of the long run" 30
t send-keys C-c
expect_screen 'cancelled; the model is still loaded' "one Ctrl-C cancels the run" 15
[ -f cosmos3-12.png ] && bad "a cancelled run wrote its image" || ok
t send-keys 'set width 32' Enter 'set height 32' Enter 'set steps 2' Enter 'seed 13' Enter 'after the cancel' Enter
expect_screen '^wrote cosmos3-13.png \(seed 13, ' "a generation after the cancel" 20
t send-keys 'history' Enter
expect_screen '^ +[0-9]+  a lighthouse at dusk$' "history command"
# Ctrl-C at the empty prompt does not leave (as in bash); Ctrl-D does
sleep 1.2
t send-keys C-c
expect_screen '^\(Ctrl-D or quit leaves' "Ctrl-C at an empty prompt: a hint" 5
sleep 1.2
t send-keys 'show steps' Enter
expect_screen '^steps = 2$' "the REPL goes on after Ctrl-C at an empty prompt" 5
t send-keys C-d
expect_screen '^EXIT=0$' "Ctrl-D leaves with 0" 10
hist="$tmp/state/cosmos3/history"
if [ -f "$hist" ] && grep -qx 'a lighthouse at dusk' "$hist" && grep -qx 'set schedule karras' "$hist"; then ok; else
    bad "history file $hist: $(cat "$hist" 2>&1)"; fi
# the prompts typed are private (audit D23)
[ "$(stat -c %a "$hist" 2>/dev/null)" = 600 ] && ok || bad "history file mode $(stat -c %a "$hist"), want 600"
t kill-server 2>/dev/null

# history across sessions: Up recalls the last line of the previous session
sock="${sock}b"
t new-session -d -x 120 -y 30 -c "$tmp" \
    "env XDG_STATE_HOME='$tmp/state' '$bin' -m '$model' --preview off; echo EXIT=\$?; sleep 60"
expect_screen '^cosmos3 > ' "second session prompt"
t send-keys Up
expect_screen '^cosmos3 > show steps$' "history kept across sessions" 5
# twice Ctrl-C within a second exits with 130 even with text typed
t send-keys C-u 'half typed'
expect_screen '^cosmos3 > half typed$' "typing in the second session" 5
t send-keys C-c   # two signals sent at once merge into one: a pause between
sleep 0.3
t send-keys C-c
expect_screen '^EXIT=130$' "two Ctrl-C within a second exit 130" 10
t kill-server 2>/dev/null

finish repl
