#!/usr/bin/env bash
# cosmos3 serve's /v1/videos on a `mkmodel --preset tiny` checkpoint (CPU),
# through the OpenAI JavaScript client and raw HTTP (tests/serve/videos_test.js):
#   server 1: create / retrieve / list / downloadContent / delete, per-step
#             progress, /sync, references (multipart, data URLs), errors; the
#             served MP4 equals `cosmos3 gen`'s frame for frame (ffmpeg framemd5)
#   server 2 (--queue 1): a full queue (429), a running and a queued job cancelled
#   server 3 (--keep-videos 2): the oldest finished video dropped first
set -u
bin=${COSMOS3_BIN:?}
src=${COSMOS3_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
js="$src/tests/serve"
[ -d "$js/node_modules/openai" ] || { echo "SKIP: run 'npm ci' in tests/serve for the openai package"; exit 77; }
command -v node >/dev/null || { echo "SKIP: node not found"; exit 77; }
command -v ffmpeg >/dev/null && command -v ffprobe >/dev/null || { echo "SKIP: ffmpeg/ffprobe not installed"; exit 77; }
"$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd" && { echo "SKIP: built without libmicrohttpd"; exit 77; }
"$bin" gen -m nowhere -p x -o x.mp4 2>&1 | grep -q "media=disabled" && { echo "SKIP: built with -Dmedia=disabled"; exit 77; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
"$bin" mkmodel --preset tiny -o tiny -q || { echo "FAIL: mkmodel"; exit 1; }

start() { # NAME ARGS...: a server of the tiny model (serve_start), once it is ready
    local name=$1
    serve_start "$name" -m tiny --max-cost 100000 "${@:2}" || return 1
    for _ in $(seq 200); do grep -q "ready:" "$name.err" && return 0; sleep 0.1; done
    bad "$name did not get ready: $(cat "$name.err")"; return 1
}
stop() { # PID: SIGTERM, then its exit status must be 0
    kill -TERM "$1"; wait "$1"; local st=$?
    [ $st = 0 ] && ok || bad "server exit status $st"
}
run_js() { # MODE
    BASE="http://127.0.0.1:$port" OUT="$tmp" node "$js/videos_test.js" "$1" > "js-$1.log" 2>&1
    local rc=$?
    cat "js-$1.log"
    [ $rc = 0 ] && ok || bad "videos_test.js $1 (exit $rc)"
}

start s1 && { run_js api; stop "$spid"; }
# the served MP4 is what ffprobe calls a 17-frame 24 fps H.264 file, and it is gen's video
if [ -f served.mp4 ]; then
    d=$(ffprobe -v error -count_frames -select_streams v:0 \
        -show_entries stream=codec_name,pix_fmt,r_frame_rate,nb_read_frames -of csv=p=0 served.mp4)
    [ "$d" = "h264,yuv420p,24/1,17" ] && ok || bad "served.mp4: $d"
    "$bin" gen -m tiny -p "a red fox runs across a snowy field" -W 64 -H 64 --frames 17 --steps 2 -S 5 \
        -o gen.mp4 -q || bad "gen"
    a=$(ffmpeg -v error -i served.mp4 -f framemd5 - | grep -v '^#' | md5sum)
    b=$(ffmpeg -v error -i gen.mp4 -f framemd5 - | grep -v '^#' | md5sum)
    [ "$a" = "$b" ] && ok || bad "the served MP4's frames differ from cosmos3 gen's"
    "$bin" meta served.mp4 > meta.txt && grep -qx "seed: 5" meta.txt && ok || bad "meta served.mp4: $(cat meta.txt)"
else
    bad "no served.mp4"
fi
n=$(ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=nb_read_frames -of csv=p=0 sync.mp4 2>&1)
[ "$n" = 9 ] && ok || bad "sync.mp4: $n frames"

start s2 --queue 1 && { run_js queue; stop "$spid"; }
start s3 --keep-videos 2 && { run_js keep; stop "$spid"; }

finish serve_videos
