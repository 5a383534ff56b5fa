#!/usr/bin/env bash
# The second hardening audit (../shared/audits/2026-12-hardening-2.md, N1-N11)
# against the command line, on the built-in demo model: decompression bombs
# as conditioning input (refused from the header, in bounded time and memory,
# under an address-space cap), a FIFO as input, an output pattern with a huge
# field width, control characters in an echoed prompt, stale temporaries of a
# killed run. The server's half is tests/test_serve_harden.sh.
set -u
bin=${COSMOS3_BIN:?}
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
unset COSMOS3_MODEL
P="a red circle on a blue background"

# small files that claim huge pictures (tests/bombs.py; the refusal reads the
# header; the pixels need not be valid)
python3 "${COSMOS3_SRCDIR:?}/tests/bombs.py" || { bad "python3 could not write the bombs"; finish harden2; exit 1; }

# A sanitizer build reserves terabytes of shadow address space: there the cap
# is ASan's own RSS limit, and the RSS bound (shadow memory included) is not checked.
if ldd "$bin" 2>/dev/null | grep -q libasan; then
    asan=1; vcap=unlimited; slow=4 # ASan's start-up alone takes about a second
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}hard_rss_limit_mb=2000"
else
    asan=0; vcap=3145728; slow=1
fi
# bomb NAME ARGS...: gen under a 3 GiB address-space cap refuses with exit 4
# and one line naming the size, in under 2 s of wall time and 300 MB RSS
bomb() {
    local name=$1; shift
    local t0 t1 rss
    t0=$(date +%s%N)
    ( ulimit -v $vcap; exec timeout 60 /usr/bin/env time -f '%M' -o rss.txt "$bin" gen -p "$P" -W 64 -H 64 \
        --frames 9 --steps 2 -o "$name.mp4" "$@" ) > out 2> err
    local rc=$?
    t1=$(date +%s%N)
    rss=$(tail -1 rss.txt 2>/dev/null)
    grep -v '^[^c]' err | grep -v '^Command exited' > err1
    [ "$rc" = 4 ] && grep -q 'larger than this use takes' err && [ "$(grep -c '^cosmos3: ' err)" = 1 ] && ok ||
        bad "$name: exit $rc, want 4 with 'larger than this use takes': $(cat err)"
    [ $(((t1 - t0) / 1000000)) -lt $((2000 * slow)) ] && ok || bad "$name: refused after $(((t1 - t0) / 1000000)) ms (want < $((2 * slow)) s)"
    [ "$asan" = 1 ] || { [ -n "$rss" ] && [ "$rss" -lt 307200 ] && ok || bad "$name: peak RSS ${rss:-?} KiB (want < 300 MB)"; }
    [ ! -e "$name.mp4" ] && ok || bad "$name: an output was left"
}
if [ -x /usr/bin/time ]; then
    bomb png16k --image bomb16k.png
    bomb png30k --image bomb30k.png
    bomb webp16k --image anim16k.webp
    bomb webp60k --video anim60k.webp
    bomb fl_end --first-last ok64.png anim16k.webp
    mkdir bombdir && cp bomb16k.png bombdir/f0.png
    bomb folder --video bombdir
    bomb wide --image wide.png
else
    echo "note: /usr/bin/time not found; the bomb cases are skipped"
fi
# meta reads a PNG's texts without inflating its pixels (fuzz_media found
# 16384^2 of them decoded for the texts)
t0=$(date +%s%N)
( [ "$asan" = 1 ] || ulimit -v 1048576; timeout 20 "$bin" meta bomb16k.png ) > out 2> err
rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$rc" != 124 ] && [ "$rc" -lt 128 ] && [ "$ms" -lt $((2000 * slow)) ] && ok || bad "meta bomb16k.png: exit $rc after $ms ms: $(cat err)"

# a picture at 4x the output's side is taken
python3 -c "
import struct, zlib
def chunk(t, d): return struct.pack('>I', len(d)) + t + d + struct.pack('>I', zlib.crc32(t + d) & 0xffffffff)
raw = b''.join(b'\0' + bytes([200, 30, 30]) * 256 for _ in range(256))
open('pic256.png', 'wb').write(b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 256, 256, 8, 2, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))"
expect 0 "" -- gen -p "$P" -W 64 -H 64 --frames 5 --steps 2 --image pic256.png -o pic.mp4

# a file past the read cap (sparse: no disk used) is refused before it is read
truncate -s 1100M huge.mp4
( [ "$asan" = 1 ] || ulimit -v 1048576; timeout 20 "$bin" gen -p "$P" -W 64 -H 64 --frames 9 --steps 2 --video huge.mp4 -o h.mp4 ) > out 2> err
rc=$?
[ "$rc" = 4 ] && grep -q 'at most 1024 MiB are read' err && ok || bad "a 1100 MiB --video: exit $rc: $(cat err)"
rm -f huge.mp4

# N4: a FIFO as any conditioning input is refused at once (it used to block in open)
mkfifo fifo.png
for args in "--image fifo.png" "--video fifo.png" "--first-last ok64.png fifo.png"; do
    timeout 20 "$bin" gen -p "$P" -W 64 -H 64 --frames 9 --steps 2 $args -o f.mp4 > out 2> err
    rc=$?
    [ "$rc" = 4 ] && grep -q 'a FIFO, not a regular file' err && ok || bad "FIFO $args: exit $rc: $(cat err)"
done

# N5: a frame pattern whose field is wider than a file name: a usage error at once
timeout 20 "$bin" gen -p "$P" -W 64 -H 64 --frames 5 --steps 2 -o 'h%0999999999d.png' > out 2> err
rc=$?
[ "$rc" = 2 ] && grep -q 'field width' err && ok || bad "-o h%0999999999d.png: exit $rc: $(cat err)"

# N8: a prompt's control characters are escaped in the vocabulary warning
"$bin" gen -p "$(printf 'a zebra \033]0;pwned\a\033[2J here')" -W 64 -H 64 --steps 1 -o e.png > out 2> err
if grep -q $'\033' err || grep -q $'\a' err; then bad "raw control characters on stderr: $(cat -v err)"; else ok; fi

# N10: a stale .NAME.tmp.* left by a killed run is removed by the next run
mkdir .v.tmp.AbC123 && touch .v.tmp.AbC123/frame_0000.png x.mp4.tmp.ZZ9xy0 && touch -d "2 hours ago" .v.tmp.AbC123 x.mp4.tmp.ZZ9xy0
expect 0 "" -- gen -p "$P" -W 64 -H 64 --frames 5 --steps 1 -o v
[ ! -e .v.tmp.AbC123 ] && ok || bad "the stale .v.tmp.AbC123 is still there"
expect 0 "" -- gen -p "$P" -W 64 -H 64 --frames 5 --steps 1 -o x.mp4
[ ! -e x.mp4.tmp.ZZ9xy0 ] && ok || bad "the stale x.mp4.tmp.ZZ9xy0 is still there"

finish harden2
