# tmux_screen.sh - sourced by the terminal tests (test_repl.sh, test_tui.sh):
# drive a program in a private tmux server and wait for text on its screen.
# The test defines $sock, $tmp, ok, bad and screen (how it captures the pane
# into $tmp/screen) before calling these.

t() { tmux -L "$sock" "$@"; }
# wait_for REGEX [SECONDS]: poll the pane until REGEX shows
wait_for() {
    local end=$((SECONDS + ${2:-20}))
    while [ $SECONDS -lt $end ]; do
        screen
        grep -qE -- "$1" "$tmp/screen" && return 0
        sleep 0.2
    done
    return 1
}
# expect_screen REGEX WHAT [SECONDS]: one check, the screen shown on failure
expect_screen() { if wait_for "$1" "${3:-20}"; then ok; else bad "$2: '$1' not on screen:"; cat "$tmp/screen"; fi; }
