/* tui.h - `cosmos3 tui`: one ncurses screen, redrawn once per frame.
 *
 * Collection (tui_collect: the REPL's event pump, driver memory once a
 * second) is apart from drawing (tui_draw: one function per panel, every
 * window staged with wnoutrefresh, one doupdate). The input line is GNU
 * readline in callback mode inside curses and runs the REPL's commands.
 * Built without ncurses/readline, tui_main explains how to get it. */
#ifndef COSMOS3_TUI_H
#define COSMOS3_TUI_H

#include "options.h"

int tui_main(c3_settings *s, char **pos, int npos);

#endif
