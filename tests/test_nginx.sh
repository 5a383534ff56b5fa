#!/usr/bin/env bash
# nginx (Debian's package) in front of two `cosmos3 serve` instances of the
# demo model on loopback (issue 32 item 5), with the configuration that
# share/nginx/cosmos3-nginx.sh writes (share/nginx/cosmos3.conf is its output):
#   - 8 image requests at once through nginx, spread over both instances
#     (each one's /metrics counts some; the answers say which ran them); a
#     picture through nginx equals the same request sent straight to one
#   - a video created, polled and downloaded through nginx: the job id names
#     its instance, the bytes equal a download straight from that instance
#   - that instance killed: the next image, list and video requests are still
#     answered (by the other), and a poll of the dead instance's job is a
#     JSON 502 within seconds, not a hang; an id naming no instance is 404
#   - nginx's body limit (serve's 1 MiB) answered 413 in JSON
# nginx runs as the user running the test, with its pid, logs and temporary
# files in the test's folder (no root, no system configuration touched).
set -u
bin=${COSMOS3_BIN:?}
src=${COSMOS3_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
nginx=$(command -v nginx || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; })
[ -n "$nginx" ] || { echo "SKIP: nginx not installed (.ci/setup, or: apt-get install nginx)"; exit 77; }
command -v curl >/dev/null && command -v jq >/dev/null && command -v python3 >/dev/null ||
    { echo "SKIP: curl, jq and python3 are needed"; exit 77; }
"$bin" serve --port -1 2>&1 | grep -q "without libmicrohttpd" && { echo "SKIP: built without libmicrohttpd"; exit 77; }
"$bin" gen -m nowhere -p x -o x.mp4 2>&1 | grep -q "media=disabled" && { echo "SKIP: built with -Dmedia=disabled"; exit 77; }
pids=()
ngx_pid=
cleanup() {
    [ -n "$ngx_pid" ] && kill -TERM "$ngx_pid" 2>/dev/null
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    [ -n "$ngx_pid" ] && wait "$ngx_pid" 2>/dev/null
}
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
gen_conf="$src/share/nginx/cosmos3-nginx.sh"

# the shipped example is the generator's output for its documented arguments
bash "$gen_conf" a=127.0.0.1:8001 b=127.0.0.1:8002 > shipped.conf &&
    cmp -s shipped.conf "$src/share/nginx/cosmos3.conf" && ok ||
    bad "share/nginx/cosmos3.conf differs from 'share/nginx/cosmos3-nginx.sh a=127.0.0.1:8001 b=127.0.0.1:8002'"
# the shipped file is valid inside Debian's own nginx.conf (a copy whose
# paths point here: its conf.d/ includes it in the http block)
if grep -q "include /etc/nginx/conf.d/\*.conf" /etc/nginx/nginx.conf 2>/dev/null; then
    cp -r /etc/nginx etc-nginx && cp "$src/share/nginx/cosmos3.conf" etc-nginx/conf.d/ &&
        sed -i "s#/etc/nginx#$tmp/etc-nginx#g; s#^pid .*#pid $tmp/etc-nginx.pid;#; s#/var/log/nginx#$tmp#g" etc-nginx/nginx.conf
    "$nginx" -t -p "$tmp" -c "$tmp/etc-nginx/nginx.conf" -e "$tmp/etc-nginx.log" > etc-nginx.out 2>&1 && ok ||
        bad "share/nginx/cosmos3.conf in Debian's nginx.conf: $(tail -3 etc-nginx.out)"
fi
# the generator refuses a name that serve --instance would refuse
bash "$gen_conf" Bad_name=127.0.0.1:1 > /dev/null 2> gen.err; rc=$?
[ $rc = 2 ] && grep -q "a-z, 0-9" gen.err && ok || bad "generator: Bad_name -> $rc $(cat gen.err)"

ready() { # NAME: wait for "ready:" in NAME.err
    for _ in $(seq 300); do grep -q "ready:" "$1.err" && return 0; sleep 0.1; done
    bad "$1 did not get ready: $(cat "$1.err")"; return 1
}
J=(-H "Content-Type: application/json")
declare -A port_of pid_of
for name in a b; do # each instance its own job store (one server per --store)
    serve_start "$name" --instance "$name" --trusted-proxy 127.0.0.1 --store "$tmp/store-$name" &&
        ready "$name" || { finish nginx; exit; }
    port_of[$name]=$port pid_of[$name]=$spid
done
grep -q "as instance a " a.err && ok || bad "a.err does not name instance a: $(head -1 a.err)"
# --instance: a name a job id can carry, else refused before anything loads
expect 2 "--instance 'Bad_x'" -- serve --port 0 --instance Bad_x
expect 2 "a-z, 0-9 and '-'" -- serve --port 0 --instance "$(printf 'x%.0s' $(seq 49))"
# the default: the host name in [a-z0-9-], then the port
serve_start c && ready c && {
    want="$(hostname | tr 'A-Z' 'a-z' | sed 's/[^a-z0-9]\{1,\}/-/g; s/^-//' | cut -c1-42 | sed 's/-$//')-$port"
    got=$(curl -s "http://127.0.0.1:$port/health" | jq -r .instance)
    [ "$got" = "$want" ] && ok || bad "the default instance is '$got', want '$want'"
    code=$(curl -s -o c.json -w '%{http_code}' "${J[@]}" -d '{"prompt":"a red circle on a blue background, moving up","num_frames":9}' "http://127.0.0.1:$port/v1/videos")
    [ "$code" = 200 ] && [[ "$(jq -r .id c.json)" =~ ^video_${want}_[0-9a-f]{20}$ ]] && ok || bad "job id on the default instance: $code $(cat c.json)"
    curl -s "http://127.0.0.1:$port/metrics" | grep -qx "cosmos3_instance_info{name=\"$want\"} 1" && ok || bad "/metrics lacks cosmos3_instance_info for $want"
    kill -TERM "$spid"; wait "$spid"; st=$?
    [ $st = 0 ] && ok || bad "instance c: exit status $st after SIGTERM: $(tail -3 c.err)"
}

# nginx on a free port (a few tries: another program may take the port first)
mkdir ngx
for _ in 1 2 3; do
    np=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    bash "$gen_conf" --standalone "$tmp/ngx" --listen "127.0.0.1:$np" \
        "a=127.0.0.1:${port_of[a]}" "b=127.0.0.1:${port_of[b]}" > ngx/nginx.conf || bad "generator"
    "$nginx" -p "$tmp/ngx" -c "$tmp/ngx/nginx.conf" -e "$tmp/ngx/error.log" -g 'daemon off;' > ngx/out 2>&1 &
    ngx_pid=$!
    N="http://127.0.0.1:$np"
    up=
    for _ in $(seq 50); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "$N/health")" = 200 ] && { up=1; break; }
        kill -0 "$ngx_pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$up" ] && break
    kill -TERM "$ngx_pid" 2>/dev/null; wait "$ngx_pid" 2>/dev/null; ngx_pid=
done
[ -n "$up" ] || { bad "nginx did not start: $(cat ngx/out ngx/error.log 2>/dev/null | tail -5)"; finish nginx; exit; }
ok

# img NAME SEED [URL]: an image request, body in NAME.json, headers in NAME.hdr; prints the status
img() {
    curl -s -o "$1.json" -D "$1.hdr" -w '%{http_code}' "${J[@]}" \
        -d "{\"prompt\":\"a red circle on a blue background, on the right\",\"seed\":$2}" \
        "${3:-$N}/v1/images/generations"
}
inst_of() { sed -n 's/^[Xx]-[Cc]osmos3-[Ii]nstance: *\([a-z0-9-]*\).*/\1/p' "$1.hdr"; }
images_total() { curl -s "http://127.0.0.1:$1/metrics" | sed -n 's/^cosmos3_images_total \([0-9]*\)$/\1/p'; }

# 8 image requests at once through nginx: all answered, by both instances
cp=()
for i in 1 2 3 4 5 6 7 8; do img "i$i" "$i" > "i$i.code" & cp+=($!); done
wait "${cp[@]}"
for i in 1 2 3 4 5 6 7 8; do
    c=$(cat "i$i.code")
    [ "$c" = 200 ] && [ "$(jq -r '.data[0].b64_json' "i$i.json" | base64 -d | head -c 4 | tail -c 3)" = PNG ] &&
        ok || bad "image $i through nginx: $c $(head -c 300 "i$i.json")"
done
na=$(images_total "${port_of[a]}") nb=$(images_total "${port_of[b]}")
echo "8 images through nginx: instance a made ${na:-?}, b ${nb:-?}"
[ "${na:-0}" -ge 1 ] && [ "${nb:-0}" -ge 1 ] && [ $((na + nb)) = 8 ] && ok ||
    bad "the 8 images were not spread over both instances: a ${na:-?}, b ${nb:-?}"
ha=$(cat i?.hdr | grep -ci '^x-cosmos3-instance: a')
[ "$ha" = "$na" ] && ok || bad "X-Cosmos3-Instance says a ran $ha, its /metrics $na"
# the same request straight to an instance: the same picture
img direct 3 "http://127.0.0.1:${port_of[b]}" > direct.code
jq -r '.data[0].b64_json' i3.json | base64 -d > via.png
jq -r '.data[0].b64_json' direct.json | base64 -d > direct.png
[ "$(cat direct.code)" = 200 ] && same_pixels via.png direct.png && ok ||
    bad "seed 3 through nginx and straight to b differ"

# a video through nginx: created, polled, downloaded; the id names its instance
code=$(curl -s -o v1.json -w '%{http_code}' "${J[@]}" \
    -d '{"prompt":"a red circle on a blue background, moving up","num_frames":9,"seed":11}' "$N/v1/videos")
vid=$(jq -r .id v1.json 2>/dev/null)
owner=$(sed -n 's/^video_\([a-z0-9-]*\)_[0-9a-f]*$/\1/p' <<< "$vid")
[ "$code" = 200 ] && { [ "$owner" = a ] || [ "$owner" = b ]; } && ok ||
    bad "POST /v1/videos through nginx: $code $(cat v1.json)"
[ "$owner" = a ] && other=b || other=a
st=
for _ in $(seq 300); do
    st=$(curl -s "$N/v1/videos/$vid" | jq -r .status)
    [ "$st" = completed ] || [ "$st" = failed ] && break
    sleep 0.1
done
[ "$st" = completed ] && ok || bad "video $vid polled through nginx: status $st"
curl -s -o via.mp4 -w '%{http_code}' "$N/v1/videos/$vid/content" > via.code
curl -s -o direct.mp4 "http://127.0.0.1:${port_of[$owner]}/v1/videos/$vid/content"
[ "$(cat via.code)" = 200 ] && [ -s via.mp4 ] && cmp -s via.mp4 direct.mp4 && ok ||
    bad "the MP4 through nginx ($(cat via.code), $(stat -c %s via.mp4 2>/dev/null) bytes) is not the one instance $owner holds"
# the other instance does not hold it, and says whose it is
code=$(curl -s -o wrong.json -w '%{http_code}' "http://127.0.0.1:${port_of[$other]}/v1/videos/$vid")
[ "$code" = 404 ] && jq -r .error.message wrong.json | grep -q "names instance '$owner'" && ok ||
    bad "instance $other asked for $vid: $code $(cat wrong.json)"
# the list through nginx is one instance's; /cosmos3/NAME/ reaches each
code=$(curl -s -o list.json -w '%{http_code}' "$N/v1/videos")
[ "$code" = 200 ] && [ "$(jq -r .object list.json)" = list ] && ok || bad "GET /v1/videos through nginx: $code"
[ "$(curl -s "$N/cosmos3/$owner/v1/videos" | jq -r '.data[0].id')" = "$vid" ] && ok ||
    bad "GET /cosmos3/$owner/v1/videos does not list $vid"
[ "$(curl -s "$N/cosmos3/$other/health" | jq -r .instance)" = "$other" ] && ok || bad "/cosmos3/$other/health"
code=$(curl -s -o noinst.json -w '%{http_code}' "$N/v1/videos/video_nobody_0123456789abcdef0000")
[ "$code" = 404 ] && jq -e .error.message noinst.json > /dev/null && ok || bad "an id naming no instance: $code $(cat noinst.json)"
# nginx's own body limit is serve's (1 MiB), answered in JSON
python3 -c 'import json; print(json.dumps({"prompt": "x" * (2 << 20)}))' > big.json
code=$(curl -s -o big.out -w '%{http_code}' "${J[@]}" --data-binary @big.json "$N/v1/images/generations")
[ "$code" = 413 ] && jq -e .error.message big.out > /dev/null && ok || bad "a 2 MiB body through nginx: $code $(head -c 200 big.out)"

# the instance holding the video dies: the next requests are still answered
kill -9 "${pid_of[$owner]}"; wait "${pid_of[$owner]}" 2>/dev/null
for i in 1 2 3 4; do
    c=$(img "k$i" "$((20 + i))")
    [ "$c" = 200 ] && [ "$(inst_of "k$i")" = "$other" ] && ok ||
        bad "image $i after $owner died: $c (instance $(inst_of "k$i")) $(head -c 300 "k$i.json")"
done
code=$(curl -s -o v2.json -w '%{http_code}' "${J[@]}" \
    -d '{"prompt":"a red circle on a blue background, moving up","num_frames":9,"seed":12}' "$N/v1/videos")
[ "$code" = 200 ] && [[ "$(jq -r .id v2.json)" == "video_${other}_"* ]] && ok ||
    bad "POST /v1/videos after $owner died: $code $(cat v2.json)"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$N/v1/models")" = 200 ] && ok || bad "GET /v1/models after $owner died"
v2=$(jq -r .id v2.json)
code=$(curl -s -o del.json -w '%{http_code}' -X DELETE "$N/v1/videos/$v2")
[ "$code" = 200 ] && [ "$(jq -r .deleted del.json)" = true ] && ok || bad "DELETE $v2 through nginx: $code $(cat del.json)"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${port_of[$other]}/v1/videos/$v2")" = 404 ] && ok ||
    bad "$v2 is still on instance $other after its DELETE through nginx"
# a poll of the dead instance's job: a clear JSON error at once, not a hang
t0=$(date +%s.%N)
code=$(curl -s -m 30 -o dead.json -w '%{http_code}' "$N/v1/videos/$vid")
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
echo "a poll of $vid after $owner died: $code in $dt s: $(cat dead.json)"
[ "$code" = 502 ] && jq -r .error.message dead.json | grep -q "does not answer" && ok ||
    bad "poll of the dead instance's job: $code $(cat dead.json)"
le "$dt" 5 && ok || bad "the poll of the dead instance's job took $dt s"
code=$(curl -s -m 30 -o dead2.json -w '%{http_code}' "$N/v1/videos/$vid/content")
[ "$code" = 502 ] && jq -e .error.message dead2.json > /dev/null && ok || bad "content of the dead instance's job: $code"
# the instance left stops cleanly
kill -TERM "${pid_of[$other]}"; wait "${pid_of[$other]}"; st=$?
[ $st = 0 ] && ok || bad "instance $other: exit status $st after SIGTERM: $(tail -3 "$other.err")"

finish nginx
