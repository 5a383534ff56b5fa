# shellcheck shell=bash
# carry.sh - sourced by bench/gpu.sh: what travels to the GPU machine
# and how it is set up there.
#
#   carry_build BUILD TARGET...    here: configure BUILD (-Dcuda=enabled) if
#                                  needed and build the targets
#   carry_pack DIR BUILD FILE...   here: copy the built FILEs into DIR, with the
#                                  libraries the GPU machine lacks (libcosmos3,
#                                  host libraries), debug info stripped, all
#                                  in one solid pack.tar.xz, and the
#                                  compiled-in source dir
#   carry_env DIR                  there: unpack the programs and libraries, set
#                                  LD_LIBRARY_PATH (+ CUDA's), link the
#                                  compiled-in source dir to this checkout

carry_build() {
    local build=$1
    shift
    # -Dmedia=disabled: FFmpeg's libraries pull in 140 shared libraries (55 MB
    # as xz), more than the carry holds with the demo model; CARRY_MEDIA=1 keeps
    # them (ldd picks them up like the others) for a run that writes MP4/WebM
    local media=disabled
    [ "${CARRY_MEDIA:-0}" = 1 ] && media=enabled
    [ -d "$build" ] || meson setup "$build" -Dcuda=enabled -Dmedia=$media || return 1
    ninja -C "$build" -j2 "$@"
}

carry_pack() {
    local pk=$1 build=$2
    shift 2
    rm -rf "$pk" && mkdir -p "$pk/lib" || return 1
    for f in "$@"; do cp "$build/$f" "$pk/" || return 1; done
    ldd "$pk"/* "$build"/libcosmos3.so* 2>/dev/null | awk '/=> \//{print $3}' | sort -u |
        grep -v -E '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/libcu|/libnccl' |
        while read -r lib; do cp -L "$lib" "$pk/lib/"; done
    # the build's own libraries (libcosmos3.so.0): found through the build's
    # relative run paths, which do not hold in DIR
    ldd "$pk"/* "$build"/libcosmos3.so* 2>/dev/null | awk '$2 == "=>" && $3 == "not" {print $1}' | sort -u |
        while read -r lib; do
            [ -e "$build/$lib" ] || { echo "carry_pack: $lib not found" >&2; continue; }
            cp -L "$build/$lib" "$pk/lib/"
        done
    # the debug info is most of a -g build's bytes; symbols stay for backtraces
    for f in "$pk"/* "$pk"/lib/*; do [ -f "$f" ] && strip --strip-debug "$f" 2>/dev/null; done
    # one solid archive: the test programs link the static library (only
    # cosmos3_* is exported by libcosmos3.so), so each carries the same few MB
    # of engine code that xz stores once
    local names=()
    for f in "$@"; do names+=("$(basename "$f")"); done
    tar -C "$pk" -cf - "${names[@]}" lib | xz -9 -T2 >"$pk/pack.tar.xz" &&
        (cd "$pk" && rm -rf lib "${names[@]}")
    sed -n 's/^#define COSMOS3_SRCDIR "\(.*\)"$/\1/p' "$build/config.h" >"$pk/srcdir"
}

carry_env() {
    local pk=$1 here
    here=$(pwd)
    local libs=/tmp/c3libs
    mkdir -p "$libs"
    if [ -f "$pk/pack.tar.xz" ]; then
        tar -C "$pk" -xJf "$pk/pack.tar.xz" && cp -a "$pk"/lib/. "$libs"/ && rm -rf "${pk:?}/lib" "${pk:?}/pack.tar.xz"
    elif [ -f "$pk/libs.tar.xz" ]; then
        tar -C "$libs" -xJf "$pk/libs.tar.xz"
    fi # else: unpacked by an earlier gpu.sh of the same call
    local cudalib=/usr/local/cuda/lib64
    [ -e "$cudalib/libcublasLt.so.13" ] || cudalib=$(dirname "$(find / -name 'libcublasLt.so.13' -print -quit 2>/dev/null)")
    export LD_LIBRARY_PATH="$libs:$cudalib:${LD_LIBRARY_PATH:-}"
    local src
    src=$(cat "$pk/srcdir" 2>/dev/null || echo /work/main)
    [ -e "$src" ] || { mkdir -p "$(dirname "$src")" && ln -s "$here" "$src"; }
}
