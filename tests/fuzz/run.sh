#!/usr/bin/env bash
# Build the libFuzzer harnesses with clang (no meson needed) and run each one
# for a number of seconds, one after the other, at low priority.
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]      default 60 s, every target
#   FUZZ_OUT=DIR       build and work folder (default /tmp/cosmos3-fuzz)
#   FUZZ_ARGS="..."    extra libFuzzer flags
#   FUZZ_BUILD_ONLY=1  only build
#
# Targets: st_parse (safetensors header), tconfig (transformer/config.json),
# vconfig (vae/config.json and the VAE sizes vae_load uses), card
# (model_index.json's "cosmos3"), tokload (tokenizer.json loading + encoding),
# tokenc (encoding and prompt assembly of arbitrary bytes with the installed
# tokenizer), media (pictures and clips decoded from memory: PNG, JPEG, WebP,
# animated WebP, MP4/WebM/MOV; -rss_limit_mb=512), multipart (the server's
# multipart/form-data bodies through libmicrohttpd's parser and the form
# code of app/serve_form.c). Each run starts from the seed corpus in
# tests/fuzz/corpus/TARGET (read only) and grows a working corpus in
# $FUZZ_OUT/corpus-TARGET; crashes land in $FUZZ_OUT as crash-TARGET-*.
# Prints one summary line per target and exits 1 if any target crashed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
secs="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(st_parse tconfig vconfig card tokload tokenc media multipart)
out="${FUZZ_OUT:-/tmp/cosmos3-fuzz}"
mkdir -p "$out"
CC="${CC_FUZZ:-clang}"
# what meson's config.h would say (checkpoint.c looks for the installed share/)
printf '#define COSMOS3_DATADIR "%s"\n#define COSMOS3_SRCDIR "%s"\n#define COSMOS3_BUILDDIR "%s"\n#define COSMOS3_HAVE_FFMPEG 1\n#define COSMOS3_HAVE_MHD 1\n' \
    /usr/local/share/cosmos3 "$root" "$out" >"$out/config.h"
command -v "$CC" >/dev/null || { echo "run.sh: $CC not found (apt-get install clang)" >&2; exit 2; }
cflags=(-g -O1 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
        -I"$root/src" -I"$root/src/base" -I"$root/app" -I"$root/include" -I"$out")
core=("$root/src/common.c" "$root/src/base/c3base.c" "$root/src/safetensors.c" "$root/src/checkpoint.c")
libs=($(pkg-config --libs jansson 2>/dev/null || echo -ljansson) -lm)
tok=("$root/src/tokenizer.c" "$root/src/prompt.c")
media=("$root/app/media.c" "$root/app/png_io.c" "$root/app/strbuf.c")
medialibs=($(pkg-config --libs libavformat libavcodec libswscale libswresample libavutil libwebpmux libwebpdemux libpng zlib) -ljpeg -lpthread)
form=("$root/app/serve_form.c" "$root/app/strbuf.c")
formlibs=($(pkg-config --libs libmicrohttpd) -lpthread)
toklibs=($(pkg-config --libs libpcre2-8 libutf8proc 2>/dev/null || echo -lpcre2-8 -lutf8proc))

for t in "${targets[@]}"; do
    src="$here/fuzz_$t.c"
    [ -f "$src" ] || { echo "run.sh: unknown target $t" >&2; exit 2; }
    extra=()
    case "$t" in
        tok*) extra=("${tok[@]}" "${toklibs[@]}") ;;
        media) extra=("${media[@]}" "${medialibs[@]}") ;;
        multipart) extra=("${form[@]}" "${formlibs[@]}") ;;
    esac
    "$CC" "${cflags[@]}" "$src" "${core[@]}" "${extra[@]}" "${libs[@]}" -o "$out/fuzz_$t"
done
[ -n "${FUZZ_BUILD_ONLY:-}" ] && { echo "built in $out"; exit 0; }

status=0
for t in "${targets[@]}"; do
    mkdir -p "$out/corpus-$t"
    log="$out/fuzz-$t.log"
    # -jobs=1 runs one worker process (output in fuzz-0.log in the cwd,
    # a folder of its own so that two run.sh can share $FUZZ_OUT)
    mkdir -p "$out/work-$t"
    maxlen=4096; [ "$t" = tokload ] && maxlen=16384 # room for a byte-level vocabulary
    rss=2048; dict="$here/json.dict"
    case "$t" in
        media) maxlen=65536; rss=512; dict="$here/media.dict" ;; # a clip needs room; a bomb must not fit
        multipart) maxlen=65536; rss=512; dict="$here/multipart.dict" ;;
    esac
    (cd "$out/work-$t" && nice -n "${FUZZ_NICE:-10}" "$out/fuzz_$t" -jobs=1 -workers=1 -max_total_time="$secs" -print_final_stats=1 \
        -dict="$dict" -max_len=$maxlen -timeout=10 -rss_limit_mb=$rss \
        -artifact_prefix="$out/crash-$t-" ${FUZZ_ARGS:-} "$out/corpus-$t" "$here/corpus/$t" >/dev/null 2>&1 || true
     mv -f fuzz-0.log "$log" 2>/dev/null || true)
    execs=$(grep -E 'stat::number_of_executed_units' "$log" | tail -1 | awk '{print $2}')
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | awk '{print $2}')
    crashes=$(ls "$out" | grep -c "^crash-$t-" || true)
    echo "$t: ${secs}s, ${execs:-?} executions, coverage ${cov:-?} edges, corpus $(ls "$out/corpus-$t" | wc -l) files, crashes ${crashes}"
    [ "$crashes" -eq 0 ] || { status=1; ls "$out" | grep "^crash-$t-" | sed "s|^|  $out/|"; }
done
exit $status
