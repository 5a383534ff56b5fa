#!/usr/bin/env bash
# Sound from the command line, on tiny-a with the tiny sound tokenizer of
# the fixtures (tiny-a/sound): `gen --sound` into MP4 (ffprobe: h264 + aac,
# 48000 Hz, 2 channels, the audio within one latent, 40 ms, of the video's
# length), WebM (Opus), a frame folder's sound.wav, -o x.wav (16-bit and
# float PCM); --noise with the upstream run's latents and sound_latents
# and --save-latents give upstream's final sound latents (rel L2 <= 1e-3);
# a checkpoint without sound_tokenizer/ refuses --sound with one line,
# exit 3; -o x.wav without --sound is a usage error.
set -u
bin=${COSMOS3_BIN:?}
command -v ffprobe >/dev/null || { echo "SKIP: ffprobe not installed (Debian package ffmpeg)"; exit 77; }
fx=
IFS=: read -ra dirs <<< "${COSMOS3_FIXTURES:-}"
for d in "${dirs[@]}"; do [ -f "$d/tiny-a/sound/sound.safetensors" ] && { fx=$d; break; }; done
[ -n "$fx" ] || { echo "SKIP: fixtures with tiny-a/sound not found (COSMOS3_FIXTURES)"; exit 77; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
"$bin" gen -m nowhere -p x -o x.mp4 2>&1 | grep -q "media=disabled" &&
    { echo "SKIP: built with -Dmedia=disabled"; exit 77; }

# the checkpoint: tiny-a's parts and the sound tokenizer
mkdir ck
for p in transformer vae scheduler text_tokenizer; do ln -s "$fx/tiny-a/model/$p" "ck/$p"; done
ln -s "$fx/tiny-a/sound/model/sound_tokenizer" ck/sound_tokenizer
cp "$fx/tiny-a/sound/model/model_index.json" ck/

S="Waves crash on a rocky beach while seagulls call overhead."
G=(gen -m ck -p "$S" -W 64 -H 64 --steps 2 --device cpu -S 3 -q)
astream() { ffprobe -v error -select_streams a:0 -show_entries "stream=$2" -of default=nw=1:nk=1 "$1"; }
vstream() { ffprobe -v error -select_streams v:0 -show_entries "stream=$2" -of default=nw=1:nk=1 "$1"; }
# within SEC seconds: |a - b| <= sec
near() { python3 -c "import sys; sys.exit(0 if abs(float('$1') - float('$2')) <= $3 else 1)"; }

# MP4: h264 + aac 48 kHz stereo, as long as the video (9 frames at 24 fps, 17 at 16 fps)
for run in "9 24" "17 16"; do
    set -- $run
    expect 0 "" -- "${G[@]}" --frames "$1" --fps "$2" --sound -o "c$1.mp4"
    [ "$(vstream "c$1.mp4" codec_name)" = h264 ] && ok || bad "video codec $(vstream "c$1.mp4" codec_name)"
    [ "$(astream "c$1.mp4" codec_name)" = aac ] && ok || bad "audio codec '$(astream "c$1.mp4" codec_name)'"
    [ "$(astream "c$1.mp4" sample_rate)" = 48000 ] && ok || bad "rate $(astream "c$1.mp4" sample_rate)"
    [ "$(astream "c$1.mp4" channels)" = 2 ] && ok || bad "channels $(astream "c$1.mp4" channels)"
    va=$(vstream "c$1.mp4" duration) aa=$(astream "c$1.mp4" duration)
    near "$va" "$aa" 0.04 && ok || bad "$1 frames at $2 fps: audio $aa s, video $va s"
    near "$va" "$(python3 -c "print($1 / $2)")" 0.001 && ok || bad "video $va s for $1 frames at $2 fps"
done
# info shows the audio stream, meta the --sound setting
expect 0 "" -- info c9.mp4
grep -q "^audio: aac, 48000 Hz, 2 channels" out && ok || bad "info c9.mp4: $(cat out)"
expect 0 "" -- meta c9.mp4
grep -qx "sound: on" out && ok || bad "meta c9.mp4: $(cat out)"
# without --sound the clip stays silent
expect 0 "" -- "${G[@]}" --frames 9 -o silent.mp4
[ -z "$(astream silent.mp4 codec_name)" ] && ok || bad "a silent run has an audio stream"

# WebM with Opus
expect 0 "" -- "${G[@]}" --frames 9 --sound -o c.webm
[ "$(astream c.webm codec_name)" = opus ] && ok || bad "webm audio '$(astream c.webm codec_name)'"
[ "$(astream c.webm channels)" = 2 ] && ok || bad "webm channels"

# the waveform alone: 10 latents x 1920 samples at 48 kHz = 0.4 s (upstream's length)
expect 0 "" -- "${G[@]}" --frames 9 --sound -o s16.wav
[ "$(astream s16.wav codec_name)" = pcm_s16le ] && ok || bad "wav codec $(astream s16.wav codec_name)"
near "$(astream s16.wav duration)" 0.4 0.0001 && ok || bad "wav duration $(astream s16.wav duration)"
expect 0 "" -- "${G[@]}" --frames 9 --sound -o f32.wav --wav-format f32
[ "$(astream f32.wav codec_name)" = pcm_f32le ] && ok || bad "f32 wav codec $(astream f32.wav codec_name)"
[ "$(astream f32.wav channels)" = 2 ] && [ "$(astream f32.wav sample_rate)" = 48000 ] && ok || bad "f32 wav format"
expect 2 "add --sound" -- "${G[@]}" --frames 9 -o nosound.wav
[ ! -e nosound.wav ] && ok || bad "nosound.wav written"

# a frame folder gets sound.wav beside the frames; --overwrite replaces both
expect 0 "" -- "${G[@]}" --frames 9 --sound -o frames/
[ "$(ls frames | grep -c '^frame_')" = 9 ] && [ -f frames/sound.wav ] && ok || bad "frames/: $(ls frames)"
expect 0 "" -- "${G[@]}" --frames 9 --sound -o frames/ --overwrite
[ -f frames/sound.wav ] && ok || bad "frames/ after --overwrite: $(ls frames)"

# held to upstream from the command line: the e2e case's noise in, the final sound latents out
python3 - "$fx/tiny-a/sound/sound.safetensors" noise.safetensors <<'PY'
import json, struct, sys
d = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; h = json.loads(d[8:8 + n])
base = 8 + n; out = {}; blobs = b''
for src, dst in (('e2e_t2vs_9f_64_g7.noise', 'latents'), ('e2e_t2vs_9f_64_g7.sound_noise', 'sound_latents')):
    t = h[src]; b, e = t['data_offsets']
    out[dst] = {'dtype': 'F32', 'shape': t['shape'], 'data_offsets': [len(blobs), len(blobs) + e - b]}
    blobs += d[base + b:base + e]
hj = json.dumps(out).encode(); hj += b' ' * (-len(hj) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(hj)) + hj + blobs)
PY
expect 0 "" -- gen -m ck -p "$S" -n "muffled audio, static noise, silence" -W 64 -H 64 --frames 9 --fps 24 \
    --steps 4 --guidance 7 --schedule karras --shift 1 --guidance-interval none --sound --device cpu -q \
    --noise noise.safetensors --save-latents final.safetensors -o up.mp4
python3 - "$fx/tiny-a/sound/sound.safetensors" final.safetensors <<'PY' && ok || bad "sound latents vs upstream"
import json, math, struct, sys
def read(p, k):
    d = open(p, 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; t = json.loads(d[8:8 + n])[k]
    b, e = t['data_offsets']; return struct.unpack('<%df' % ((e - b) // 4), d[8 + n + b:8 + n + e])
for gk, k in (('e2e_t2vs_9f_64_g7.sound_latents_final', 'sound_latents'), ('e2e_t2vs_9f_64_g7.latents_final', 'latents')):
    ref, got = read(sys.argv[1], gk), read(sys.argv[2], k)
    err = math.sqrt(sum((a - b) ** 2 for a, b in zip(got, ref)) / sum(b * b for b in ref))
    print('%s: rel L2 %.3g' % (k, err))
    if len(ref) != len(got) or err > 1e-3: sys.exit(1)
PY

# the REPL: `set sound on`, and the level meter line of the finished clip's sound
printf 'set width 64\nset height 64\nset frames 9\nset steps 2\nset sound on\nset output r.mp4\nwaves on a beach\n' |
    "$bin" repl -m ck --device cpu > repl.out 2>&1
grep -q "^sound 48 kHz stereo 0.40 s  L \[[#.]*\] .* dBFS" repl.out && ok || bad "REPL level meter: $(cat repl.out)"
[ "$(astream r.mp4 codec_name)" = aac ] && ok || bad "REPL r.mp4 has no aac stream"

# serve: /v1/videos/sync with generate_sound returns an MP4 with the sound
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
if command -v curl >/dev/null && serve_start sv -m ck --device cpu --max-cost 100000; then
    for _ in $(seq 300); do grep -q "ready:" sv.err && break; sleep 0.1; done
    code=$(curl -s -o served.mp4 -w "%{http_code}" -X POST -H 'Content-Type: application/json' \
        -d '{"prompt":"waves","size":"64x64","num_frames":9,"num_inference_steps":2,"generate_sound":true}' \
        "http://127.0.0.1:$port/v1/videos/sync")
    [ "$code" = 200 ] && [ "$(vstream served.mp4 codec_name)" = h264 ] && ok || bad "served: HTTP $code"
    [ "$(astream served.mp4 codec_name)" = aac ] && [ "$(astream served.mp4 sample_rate)" = 48000 ] &&
        [ "$(astream served.mp4 channels)" = 2 ] && ok || bad "served.mp4 audio '$(astream served.mp4 codec_name)'"
    near "$(vstream served.mp4 duration)" "$(astream served.mp4 duration)" 0.04 && ok || bad "served.mp4 durations"
    code=$(curl -s -o bad.json -w "%{http_code}" -X POST -H 'Content-Type: application/json' \
        -d '{"prompt":"waves","generate_sound":"maybe"}' "http://127.0.0.1:$port/v1/videos/sync")
    [ "$code" = 400 ] && grep -q "generate_sound" bad.json && ok || bad "generate_sound maybe: HTTP $code"
    kill -TERM "$spid"; wait "$spid"
fi

# a checkpoint without the sound tokenizer: one line naming the folder, exit 3
expect 3 "sound_tokenizer/" -- gen -m "$fx/tiny-a/model" -p "$S" -W 64 -H 64 --frames 9 --steps 1 --device cpu \
    --sound -q -o refused.mp4
[ ! -e refused.mp4 ] && ok || bad "refused.mp4 written"

finish sound_cli
