#!/usr/bin/env bash
# FFmpeg's libraries are opened on the first clip or WebP (app/ffmpeg_dl.c),
# so that --version, help, meta and info of a PNG open none of them. The
# CUDA backend is a module (libcosmos3-cuda.so) that libcosmos3 opens
# on the first GPU call: neither the program nor the library links the CUDA
# libraries, --version and help map none of them, and a machine without the
# module (hidden here: a copy of the program and the library in a folder of
# their own; COSMOS3_CUDA_MODULE naming nothing or a broken file) runs
# every command on the CPU with one "device:" line naming why.
set -u
build=${COSMOS3_BUILDDIR:?}
src=${COSMOS3_SRCDIR:?}
# shellcheck source=tests/cli_lib.sh
. "$src/tests/cli_lib.sh"
unset COSMOS3_CUDA_MODULE # the tests of internals' setting (tests/meson.build)
demo=$src/share/models/demo
cuda=0
grep -q '^#define COSMOS3_HAVE_CUDA 1' "$build/config.h" && cuda=1
cudalibs='libcudart|libcublas|libcublasLt|libnccl'
ffmpeglibs='libavformat|libavcodec|libavutil|libswscale|libswresample'

# (what links what: tests/test_symbols.sh)
# --version, help, meta and info FILE open no CUDA library (ld.so's own account)
"$bin" gen -m "$demo" -p "a red circle on a blue background" -s 2 -S 5 -o pic.png --device cpu 2>/dev/null ||
    bad "gen --device cpu"
for args in "--version" "help" "help gen" "meta pic.png" "info pic.png"; do
    # shellcheck disable=SC2086 # args: words
    LD_DEBUG=files "$bin" $args >out 2>lddebug || bad "cosmos3 $args: exit $?"
    grep -qE "file=($cudalibs)" lddebug && bad "cosmos3 $args opens the CUDA libraries" || ok
    # nor FFmpeg's (and their 100-odd dependencies: ~70 ms at every start), loaded on first use
    grep -qE "file=($ffmpeglibs)" lddebug && bad "cosmos3 $args opens FFmpeg's libraries" || ok
done
# a clip loads them: its write and its info (built with FFmpeg)
if "$bin" --version | grep -q '^  video files *yes'; then
    "$bin" gen -m "$demo" -p "a red circle on a blue background" -s 2 -S 5 -F 5 -o clip.webm --device cpu \
        2>/dev/null || bad "gen -o clip.webm"
    LD_DEBUG=files "$bin" info clip.webm >out 2>lddebug && grep -q '^format: webm, vp9' out &&
        grep -qE "file=libavformat" lddebug && ok || bad "info clip.webm: $(head -3 out)"
fi

# hidden: the program and the library copied without the module
mkdir hidden
cp "$bin" hidden/ || bad "copy $bin"
for f in "$build"/libcosmos3.so*; do [ -d "$f" ] || cp -P "$f" hidden/ || bad "copy $f"; done
hbin=$tmp/hidden/$(basename "$bin")
run_hidden() { LD_LIBRARY_PATH=$tmp/hidden "$hbin" "$@"; }
run_hidden --version >out 2>err && grep -q '^cosmos3 ' out && ok || bad "--version without the module: $(cat err)"
run_hidden info -m "$demo" >out 2>err && grep -q '^device: cpu (no usable GPU: ' out && ok ||
    bad "info -m demo without the module: $(cat out err)"
if [ $cuda = 1 ]; then
    grep -qF "the CUDA module libcosmos3-cuda.so is not beside libcosmos3" out && ok ||
        bad "info's device line does not name the missing module: $(grep device: out)"
fi
run_hidden gen -m "$demo" -p "a red circle on a blue background" -s 2 -S 5 -o hidden.png >out 2>err &&
    [ -s hidden.png ] && ok || bad "gen without the module: $(cat err)"
[ "$(grep -cE '^(warning: )?device: ' err)" = 1 ] && ok || bad "gen without the module: not one device line: $(cat err)"
cmp -s pic.png hidden.png && ok || bad "the hidden module's CPU picture differs from --device cpu's"
run_hidden info hidden.png >out 2>err && grep -q '^size: 64x64' out && ok || bad "info FILE without the module"
run_hidden meta hidden.png >out 2>err && grep -q 'a red circle' out && ok || bad "meta FILE without the module"
run_hidden tokenize -m "$demo" --raw "a red circle" >out 2>err && [ "$(cat out)" = "64 2518 12671" ] && ok ||
    bad "tokenize without the module: $(cat out err)"
LD_LIBRARY_PATH=$tmp/hidden "$hbin" gen -m "$demo" -p "a red circle on a blue background" -s 2 -o dev.png \
    --device cuda >out 2>err
rc=$?
[ $rc = 6 ] && [ "$(wc -l <err)" = 1 ] && grep -q "no usable GPU" err && ok ||
    bad "gen --device cuda without the module: exit $rc, want 6 and one line: $(cat err)"

# COSMOS3_CUDA_MODULE: empty (none), or a file that is not a module
COSMOS3_CUDA_MODULE= "$bin" info -m "$demo" >out 2>err && grep -q '^device: cpu (no usable GPU: ' out && ok ||
    bad "COSMOS3_CUDA_MODULE= info: $(cat out err)"
echo "not a module" >broken.so
COSMOS3_CUDA_MODULE=$tmp/broken.so "$bin" gen -m "$demo" -p "a red circle on a blue background" -s 2 -S 5 \
    -o broken.png >out 2>err && [ -s broken.png ] && ok || bad "gen with a broken module: $(cat err)"
if [ $cuda = 1 ]; then
    grep -qE "^(warning: )?device: cpu \(no usable GPU: cannot open the CUDA module: .*broken.so" err && ok ||
        bad "the broken module is not named on the device line: $(cat err)"
fi
finish module
