#!/usr/bin/env bash
# vLLM-Omni's clients against `cosmos3 serve` with the built-in demo model
# (issue 36 items 3 and 8): the request shapes of vLLM-Omni's own serving
# docs (docs/serving/videos_api.md, image_generation_api.md: multipart
# /v1/videos with num_frames, fps, width/height, input_reference files,
# image_reference / video_reference JSON strings, extra_params as a JSON
# string, max_sequence_length, /v1/videos/sync; JSON /v1/images/generations
# with seed, n, negative_prompt, response_format "file"), at the demo's size;
# and the seed's launch line, `serve nvidia/Cosmos3-Super --omni ...`, over a
# stand-in Hugging Face cache, answering the seed's client request.
set -u
bin=${COSMOS3_BIN:?}
command -v curl >/dev/null && command -v jq >/dev/null || { echo "SKIP: curl and jq are needed"; exit 77; }
command -v ffprobe >/dev/null && command -v ffmpeg >/dev/null || { echo "SKIP: ffmpeg/ffprobe not installed"; exit 77; }
"$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd" && { echo "SKIP: built without libmicrohttpd"; exit 77; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"

ready() { # NAME: wait for "ready:" in NAME.err
    for _ in $(seq 600); do grep -q "ready:" "$1.err" && return 0; sleep 0.1; done
    bad "$1 did not get ready: $(cat "$1.err")"; return 1
}
frames() { ffprobe -v error -count_frames -select_streams v:0 -show_entries stream=width,height,nb_read_frames -of csv=p=0 "$1" 2>&1; }
md5frames() { ffmpeg -v error -i "$1" -f framemd5 - | grep -v '^#' | md5sum; }

# the inputs: a still, and a 9-frame clip of it moving right
"$bin" gen -p "a red circle on a blue background" -S 3 -q -o input.png || bad "gen input.png"
"$bin" gen --image input.png -p "a red circle on a blue background, moving to the right" --frames 9 -S 4 -q -o input.mp4 || bad "gen input.mp4"
datapng="data:image/png;base64,$(base64 -w0 input.png)"
datamp4="data:video/mp4;base64,$(base64 -w0 input.mp4)"

mkdir media media/inner && cp input.png media/inner/ && ln -s "$tmp/input.png" media/out.png
serve_start s1 --allowed-local-media-path "$tmp/media" && ready s1 || { finish vllm_omni; exit; }
B="http://127.0.0.1:$port"
# post NAME ARGS...: curl into NAME.body, the status in $code
post() { local n=$1; shift; code=$(curl -s -o "$n.body" -w '%{http_code}' "$@"); }
J=(-H "Content-Type: application/json")
# a longer negative prompt than the last request's (issue 36: NaN latents, 500)
post neg "$B/v1/images/generations" "${J[@]}" -d '{"prompt": "a red circle on a blue background", "negative_prompt": "blurry, low quality, distorted, ugly", "num_inference_steps": 8, "size": "64x64", "max_sequence_length": 512}'
[ "$code" = 200 ] && ok || bad "negative_prompt: $code $(head -c 300 neg.body)"
# max_sequence_length below the prompt's template ids: cut there, and the answer says so
post cut "$B/v1/images/generations" "${J[@]}" -d '{"prompt": "a red circle on a blue background at the top, a bright red circle", "num_inference_steps": 4, "size": "64x64", "max_sequence_length": 20}'
[ "$code" = 200 ] && jq -r '.warnings[]?' cut.body | grep -q "positive prompt.*max_sequence_length 20 cut it" && ok ||
    bad "max_sequence_length 20: $code $(head -c 400 cut.body)"

# videos_api.md "Create a Video Job" (width/height/num_frames not valid: rounded, as vLLM-Omni does)
post create "$B/v1/videos" -F "prompt=a red circle on a blue background, moving to the right" \
    -F "width=70" -F "height=60" -F "num_frames=8" -F "fps=16" -F "num_inference_steps=4"
[ "$code" = 200 ] && ok || bad "create: $code $(cat create.body)"
id=$(jq -r .id create.body)
jq -r '.warnings[]?' create.body > w.txt
grep -q "width: 70 rounded to 64" w.txt && grep -q "height: 60 rounded to 64" w.txt &&
    grep -q "num_frames: 8 rounded to 9" w.txt && ok || bad "the rounding is not stated: $(cat create.body)"
for _ in $(seq 300); do st=$(curl -s "$B/v1/videos/$id" | jq -r .status); [ "$st" = completed ] || [ "$st" = failed ] && break; sleep 0.1; done
[ "$st" = completed ] && ok || bad "job $id: $st"
curl -s -L "$B/v1/videos/$id/content" -o output.mp4
[ "$(frames output.mp4)" = "64,64,9" ] && ok || bad "content: $(frames output.mp4)"

# "Image-to-Video": a picture as input_reference
post i2v "$B/v1/videos/sync" -F "prompt=a red circle on a blue background, moving to the right" \
    -F "input_reference=@input.png" -F "width=64" -F "height=64" -F "num_frames=9" -F "fps=16" -F seed=5
[ "$code" = 200 ] && [ "$(frames i2v.body)" = "64,64,9" ] && ok || bad "i2v: $code $(head -c 300 i2v.body)"
# "Video-to-Video": a clip as input_reference is video-to-video, as gen --video is
post v2v "$B/v1/videos/sync" -F "prompt=a red circle on a blue background, moving up" \
    -F "input_reference=@input.mp4;type=video/mp4" -F "width=64" -F "height=64" -F "num_frames=9" -F "fps=24" -F seed=6
[ "$code" = 200 ] && ok || bad "v2v: $code $(head -c 300 v2v.body)"
"$bin" gen --video input.mp4 -p "a red circle on a blue background, moving up" --frames 9 -S 6 -q -o v2v_gen.mp4
"$bin" gen --image input.mp4 -p "a red circle on a blue background, moving up" --frames 9 -S 6 -q -o i2v_gen.mp4
[ "$(md5frames v2v.body)" = "$(md5frames v2v_gen.mp4)" ] && ok || bad "a clip as input_reference is not gen --video's video-to-video"
[ "$(md5frames v2v.body)" != "$(md5frames i2v_gen.mp4)" ] && ok || bad "a clip as input_reference was cut to its first frame"
# video_reference as its JSON string with a data URL: the same; a remote URL: a clear 400
post vref "$B/v1/videos/sync" -F "prompt=a red circle on a blue background, moving up" \
    --form-string "video_reference={\"video_url\":\"$datamp4\"}" -F "width=64" -F "height=64" -F "num_frames=9" -F "fps=24" -F seed=6
[ "$code" = 200 ] && [ "$(md5frames vref.body)" = "$(md5frames v2v_gen.mp4)" ] && ok || bad "video_reference JSON string: $code $(head -c 300 vref.body)"
post remote "$B/v1/videos" -F "prompt=continue this motion" \
    -F 'video_reference={"video_url":"https://example.com/input.mp4"}' -F "width=64" -F "height=64" -F "num_frames=9"
[ "$code" = 400 ] && jq -r .error.message remote.body | grep -q "fetches no URLs" && ok || bad "remote video_url: $code $(cat remote.body)"
# image_reference as its JSON string
post iref "$B/v1/videos/sync" -F "prompt=a red circle on a blue background, moving to the right" \
    --form-string "image_reference={\"image_url\": \"$datapng\"}" -F "width=64" -F "height=64" -F "num_frames=9" -F "fps=16" -F seed=5
[ "$code" = 200 ] && [ "$(md5frames iref.body)" = "$(md5frames i2v.body)" ] && ok || bad "image_reference JSON string: $code $(head -c 300 iref.body)"
# extra_params as a JSON string, with vLLM-Omni's Cosmos3 keys; max_sequence_length
post extra "$B/v1/videos/sync" -F "prompt=a red circle on a blue background, moving to the right" \
    -F 'extra_params={"use_resolution_template": false, "use_duration_template": false, "use_system_prompt": true, "negative_metadata_mode": "same", "guardrails": false}' \
    -F "max_sequence_length=512" -F "width=64" -F "height=64" -F "num_frames=9" -F "num_inference_steps=4"
[ "$code" = 200 ] && [ "$(frames extra.body)" = "64,64,9" ] && ok || bad "extra_params JSON string: $code $(head -c 300 extra.body)"
post extra2 "$B/v1/videos" -F "prompt=a red circle" -F 'extra_params={"bogus": 1}' -F "num_frames=9"
[ "$code" = 400 ] && jq -r .error.param extra2.body | grep -q "extra_params.bogus" && ok || bad "extra_params unknown key: $code $(cat extra2.body)"
post extra3 "$B/v1/videos" -F "prompt=a red circle" -F 'extra_params={"guardrails": true}' -F "num_frames=9" -F "num_inference_steps=2"
[ "$code" = 200 ] && jq -r '.warnings[]' extra3.body | grep -q "no guardrail models" && ok || bad "guardrails true: $code $(cat extra3.body)"
# --allowed-local-media-path: a path inside the folder; '..' and a symlink out of it refused
post local "$B/v1/videos/sync" -F "prompt=a red circle on a blue background, moving to the right" \
    -F "image_reference={\"image_url\": \"file://$tmp/media/inner/input.png\"}" -F "width=64" -F "height=64" -F "num_frames=9" -F "fps=16" -F seed=5
[ "$code" = 200 ] && [ "$(md5frames local.body)" = "$(md5frames i2v.body)" ] && ok || bad "a local path under the allowed folder: $code $(head -c 300 local.body)"
post dotdot "$B/v1/videos" -F "prompt=x" -F "image_reference={\"image_url\": \"$tmp/media/../input.png\"}" -F "num_frames=9"
[ "$code" = 400 ] && jq -r .error.message dotdot.body | grep -q "outside the folder" && ok || bad "'..' out of the allowed folder: $code $(cat dotdot.body)"
post link "$B/v1/videos" -F "prompt=x" -F "image_reference={\"image_url\": \"file://$tmp/media/out.png\"}" -F "num_frames=9"
[ "$code" = 400 ] && jq -r .error.message link.body | grep -q "outside the folder" && ok || bad "a symlink out of the allowed folder: $code $(cat link.body)"

# a prompt of spaces is refused before it is queued
post blank "$B/v1/videos" -F "prompt=   " -F "num_frames=9"
[ "$code" = 400 ] && jq -r .error.param blank.body | grep -qx prompt && ok || bad "a blank prompt: $code $(cat blank.body)"
# image_generation_api.md: JSON, seed, n, negative_prompt (above), response_format "file"
post img "$B/v1/images/generations" "${J[@]}" -d '{"prompt": "a red circle on a blue background", "size": "64x64", "seed": 42}'
[ "$code" = 200 ] && jq -r '.data[0].b64_json' img.body | base64 -d > img.png && [ "$(head -c 4 img.png | tail -c 3)" = PNG ] && ok || bad "images: $code $(head -c 300 img.body)"
code=$(curl -s -D file.hdr -o file.png -w '%{http_code}' "$B/v1/images/generations" "${J[@]}" \
    -d '{"prompt": "a red circle on a blue background", "size": "64x64", "seed": 42, "response_format": "file"}')
[ "$code" = 200 ] && cmp -s file.png img.png && grep -qi '^content-disposition: attachment; filename="cosmos3-42.png"' file.hdr && ok ||
    bad "response_format file: $code $(cat file.hdr)"
post n4 "$B/v1/images/generations" "${J[@]}" -d '{"prompt": "a green square on a white background", "n": 4, "size": "64x64", "seed": 123, "num_inference_steps": 4}'
[ "$code" = 200 ] && [ "$(jq '.data | length' n4.body)" = 4 ] && ok || bad "n 4: $code $(head -c 300 n4.body)"
post odd "$B/v1/images/generations" "${J[@]}" -d '{"prompt": "a red circle on a blue background", "size": "65x70", "num_inference_steps": 4}'
[ "$code" = 200 ] && [ "$(jq -r .size odd.body)" = 64x64 ] && jq -r '.warnings[]' odd.body | grep -q "rounded to 64" && ok || bad "size 65x70: $code $(head -c 300 odd.body)"
# the demo model's limits reach the answer and the log, as the CLI prints them
post big "$B/v1/videos" -F "prompt=a red circle on a blue background" -F "size=128x128" -F "num_frames=1" -F "num_inference_steps=2"
id=$(jq -r .id big.body)
for _ in $(seq 300); do curl -s "$B/v1/videos/$id" > big2.body; st=$(jq -r .status big2.body); [ "$st" = completed ] || [ "$st" = failed ] && break; sleep 0.1; done
jq -r '.warnings[]?' big2.body | grep -q "trained at 64x64" && ok || bad "a 128x128 demo request carries no warning: $(cat big2.body)"
grep -q "warning: .*trained at 64x64" s1.err && ok || bad "the server's log lacks the demo's size warning"
kill -TERM "$spid"; wait "$spid"

# --- item 8: the seed's launch line over a stand-in Hugging Face cache ---
commit=0123456789abcdef0123456789abcdef01234567
snap="$tmp/hf/hub/models--nvidia--Cosmos3-Super/snapshots/$commit"
mkdir -p "$snap" "$tmp/hf/hub/models--nvidia--Cosmos3-Super/refs"
cp -r "$COSMOS3_SRCDIR/share/models/demo/." "$snap/"
printf '%s' "$commit" > "$tmp/hf/hub/models--nvidia--Cosmos3-Super/refs/main"
# absent: one line naming the download command; nothing fetched
HF_HUB_CACHE="$tmp/nohub" expect 3 "huggingface-cli download nvidia/Cosmos3-Super" -- info -m nvidia/Cosmos3-Super
HF_HOME="$tmp/hf" expect 0 "" -- info -m nvidia/Cosmos3-Super
grep -q "$snap" "$tmp/out" && ok || bad "info -m MODEL-ID did not find the snapshot: $(cat "$tmp/out")"
HF_HOME="$tmp/hf" expect 0 "" -- gen -m nvidia/Cosmos3-Super --revision main -p "a red circle on a blue background" -o hf.png -q
HF_HOME="$tmp/hf" expect 3 "revision 'v2' is not in the Hugging Face cache" -- gen -m nvidia/Cosmos3-Super --revision v2 -p x
HF_HOME="$tmp/hf" expect 3 "does not match the checkpoint" -- info -m nvidia/Cosmos3-Super --model-class-name WanPipeline
printf 'a red circle on a blue background\nquit\n' | HF_HOME="$tmp/hf" "$bin" -m nvidia/Cosmos3-Super > repl.out 2> repl.err
grep -q "loaded .* ($snap" repl.err && ok || bad "REPL -m MODEL-ID: $(cat repl.err)"
printf 'load nvidia/Cosmos3-Super\nquit\n' | HF_HOME="$tmp/hf" "$bin" > repl2.out 2> repl2.err
grep -q "loaded .* ($snap" repl2.err && ok || bad "REPL load MODEL-ID: $(cat repl2.err)"
# the load bounded: --init-timeout
COSMOS3_TEST_SERVE_LOAD_DELAY=5 "$bin" serve --port 0 --init-timeout 1 > it.out 2> it.err
rc=$?
[ "$rc" = 3 ] && grep -q "^cosmos3: the model did not load within --init-timeout 1 s" it.err && ok || bad "--init-timeout: exit $rc, $(cat it.err)"
# the launch line as pasted (the port: any free one), and the seed's client request
HF_HOME="$tmp/hf" serve_start s2 nvidia/Cosmos3-Super --omni --tensor-parallel-size 4 --cfg-parallel-size 2 \
    --model-class-name Cosmos3OmniDiffusersPipeline --allowed-local-media-path / --init-timeout 1800 && ready s2 && {
    B="http://127.0.0.1:$port"
    grep -q "tp 4 x cfg-parallel 2" s2.err && ok || bad "the launch line's layout: $(grep ready s2.err)"
    [ "$(curl -s "$B/v1/models" | jq -r '.data[0].id')" = nvidia/Cosmos3-Super ] && ok || bad "/v1/models does not name the launch line's model id"
    post seed "$B/v1/images/generations" "${J[@]}" -d '{"model": "nvidia/Cosmos3-Super", "prompt": "a red circle on a blue background, on the right", "guidance_scale": 4.0, "negative_prompt": "blurry", "size": "64x64", "seed": 1}'
    [ "$code" = 200 ] && [ "$(jq -r .size seed.body)" = 64x64 ] && ok || bad "the seed's client request: $code $(head -c 300 seed.body)"
    post seedv "$B/v1/videos/sync" -F "prompt=a red circle on a blue background, moving to the right" -F "guidance_scale=4.0" \
        -F "negative_prompt=blurry" -F "size=64x64" -F "num_frames=9" -F "num_inference_steps=4"
    [ "$code" = 200 ] && [ "$(frames seedv.body)" = "64,64,9" ] && ok || bad "the seed's video request: $code $(head -c 300 seedv.body)"
    kill -TERM "$spid"; wait "$spid"
}

finish vllm_omni
