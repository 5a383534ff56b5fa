#!/usr/bin/env bash
# The hardening audit's crafted inputs (../shared/audits/2026-12-hardening.md,
# D2-D23) against the command line, on a random tiny checkpoint made here by
# mkmodel and the built-in demo model (no fixtures needed). Every case must
# end with the documented exit status, a one-line message naming the problem
# (and the file or key), in bounded time, and leave no output behind.
# Checkpoint variants are copies of `base` with one file replaced; binary
# edits use perl (perl-base is in every Debian).
set -u
bin=${COSMOS3_BIN:?}
command -v perl >/dev/null || { echo "SKIP: perl not found"; exit 77; }
. "${COSMOS3_SRCDIR:?}/tests/cli_lib.sh"
unset COSMOS3_MODEL
P="a red circle on a blue background"
TS=transformer/diffusion_pytorch_model.safetensors
VS=vae/diffusion_pytorch_model.safetensors

# expect CODE SUBSTRING -- ARGS... (in place of cli_lib.sh's): exit status within 120 s,
# one error line naming SUBSTRING (notes and warnings may come before it)
expect() {
    local code=$1 sub=$2; shift 3
    timeout 120 "$bin" "$@" > out 2> err
    local rc=$?
    if [ "$rc" != "$code" ]; then bad "cosmos3 $* -> exit $rc, want $code: $(head -c 400 err)"; return 1; fi
    if [ -n "$sub" ] && ! grep -qF -- "$sub" err; then bad "cosmos3 $* -> '$(head -c 400 err)' lacks '$sub'"; return 1; fi
    # one error line (notes such as "device: cpu ..." or warnings may come before it)
    if [ "$code" != 0 ] && [ "$(grep -c '^cosmos3: ' err)" != 1 ]; then bad "cosmos3 $*: not one error line: $(cat err)"; return 1; fi
    ok
}
# variant NAME: a copy of base (hard links: replace a file, never edit it in place)
variant() { rm -rf "$tmp/$1"; cp -al "$tmp/base" "$tmp/$1"; }
replace() { # FILE CONTENT: a new file in place of a hard link
    rm -f "$1"; printf '%s' "$2" > "$1"
}
jset() { # FILE KEY JSON-VALUE: a top-level key of a JSON object (perl, one line)
    perl -0777 -e 'local $/; open F, "<", $ARGV[0]; $t = <F>; close F;
        $k = quotemeta($ARGV[1]); $t =~ s/"$k"\s*:\s*(\[[^\]]*\]|[^,}\s]+)/"$ARGV[1]": $ARGV[2]/ or die "no key";
        unlink $ARGV[0]; open F, ">", $ARGV[0]; print F $t' "$@"
}
# st_poke FILE TENSOR BYTES: fill a tensor's data with a repeated byte string (perl pack)
st_poke() {
    perl -e 'my ($f, $name, $pat) = @ARGV; open F, "<", $f or die; binmode F; local $/; my $b = <F>; close F;
        my $n = unpack("Q<", substr($b, 0, 8)); my $h = substr($b, 8, $n);
        $h =~ /"\Q$name\E":\{[^}]*"data_offsets":\[(\d+),(\d+)\]/ or die "no tensor $name";
        my ($a, $z) = ($1, $2); my $p = pack("H*", $pat);
        substr($b, 8 + $n + $a, $z - $a) = substr($p x (($z - $a) / length($p) + 1), 0, $z - $a);
        unlink $f; open F, ">", $f; binmode F; print F $b; close F' "$@"
}
# st_header FILE PERL-SUBSTITUTION: edit the header text, keeping its length
st_header() {
    perl -e 'my ($f, $e) = @ARGV; open F, "<", $f or die; binmode F; local $/; my $b = <F>; close F;
        my $n = unpack("Q<", substr($b, 0, 8)); local $_ = substr($b, 8, $n); eval $e; die $@ if $@;
        length($_) == $n or die "header length changed"; substr($b, 8, $n) = $_;
        unlink $f; open F, ">", $f; binmode F; print F $b; close F' "$@"
}
gen() { "$bin" gen -m "$1" -p "$P" -W 64 -H 64 --steps 2 --seed 1 "${@:2}"; }

"$bin" mkmodel --preset tiny -o base -q || { echo "FAIL: mkmodel"; exit 1; }
expect 0 "" -- info -m base --check
grep -q "^check: ok: " out && ok || bad "info --check on a good checkpoint: $(cat out | tail -2)"

# ---------------------------------------------------------------- D2: vae/config.json
for kv in "patch_size 65536" "num_res_blocks -2" "num_res_blocks 1073741824" "decoder_base_dim 1073741824" \
          "scale_factor_spatial 8" "dim_mult [1,2,4]"; do
    set -- $kv
    variant v; jset v/vae/config.json "$1" "$2"
    expect 3 "\"$1\"" -- info -m v
    expect 3 "\"$1\"" -- gen -m v -p "$P" -W 64 -H 64 --steps 2 -o v.png
done
[ ! -e v.png ] && ok || bad "a refused VAE config left v.png"

# ---------------------------------------------------------------- D3, D15: tokenizer.json
variant v; replace v/text_tokenizer/tokenizer.json '{"model":{"type":"BPE","vocab":{"a":1073741822},"merges":[]}}'
t0=$(date +%s)
expect 3 "out of range for the vocabulary" -- info -m v
expect 3 "tokenizer.json" -- gen -m v -p "$P" -W 64 -H 64 --steps 2 -o v.png
[ $(( $(date +%s) - t0 )) -le 10 ] && ok || bad "a 62-byte tokenizer.json took over 10 s"
variant v; replace v/text_tokenizer/tokenizer.json '{"model":{"vocab":{"\u0041":0}},"model":{}}'
expect 3 "appears twice" -- info -m v
variant v; rm v/text_tokenizer/tokenizer.json; mkdir v/text_tokenizer/tokenizer.json
expect 3 "is a folder, not a regular file" -- info -m v
[ "$(grep -o 'cannot read the tokenizer' err | wc -l)" = 1 ] && ok || bad "tokenizer message repeats itself: $(cat err)"

# ---------------------------------------------------------------- D8, D9: FIFOs, loops, folders
variant v; rm v/$TS; mkfifo v/$TS
expect 3 "is a FIFO, not a regular file" -- info -m v
variant v; rm v/transformer/config.json; mkfifo v/transformer/config.json
expect 3 "is a FIFO" -- info -m v
variant v; rm v/$TS; ln -s diffusion_pytorch_model.safetensors v/$TS
expect 3 "a loop of symbolic links" -- info -m v
variant v; rm v/vae/config.json; mkdir v/vae/config.json
expect 3 "vae/config.json: is a folder" -- info -m v
expect 4 "--noise /nonexistent.safetensors: No such file" -- gen -p "$P" --noise /nonexistent.safetensors -o n.png
[ "$(grep -o -- '--noise' err | wc -l)" = 1 ] && ok || bad "--noise message repeats itself: $(cat err)"

# ---------------------------------------------------------------- D6: NaN/Inf
variant v; st_poke v/$TS layers.0.mlp.down_proj.weight c07f      # bf16 NaN
expect 3 "transformer weights hold NaN or Inf" -- gen -m v -p "$P" -W 64 -H 64 --steps 2 -o v.png
expect 3 "tensor layers.0.mlp.down_proj.weight holds nan" -- info -m v --check
variant v; st_poke v/$TS norm_moe_gen.weight 807f                # bf16 +Inf
expect 3 "NaN or Inf" -- gen -m v -p "$P" -W 64 -H 64 --steps 2 -o v.png
variant v; st_poke v/$VS decoder.conv_out.weight 0000c07f       # f32 NaN in the VAE
expect 3 "the VAE weights hold NaN or Inf" -- gen -m v -p "$P" -W 64 -H 64 --steps 2 -o v.png
expect 3 "decoder.conv_out.weight holds nan" -- info -m v --check
[ ! -e v.png ] && ok || bad "non-finite weights still wrote v.png"

# ---------------------------------------------------------------- D7: dtypes
variant v; st_header v/$TS 's/"BF16"/"F16" /g'
expect 3 "but config.json's torch_dtype says BF16" -- gen -m v -p "$P" -W 64 -H 64 --steps 2 -o v.png
expect 3 "torch_dtype" -- info -m v --check
variant v; st_header v/$VS 's/("decoder.conv_out.weight":\{"dtype":)"F32"/$1"I32"/'
expect 3 "tensor decoder.conv_out.weight is I32, which a weight cannot be" -- info -m v --check
expect 3 "decoder.conv_out.weight is I32" -- gen -m v -p "$P" -W 64 -H 64 --steps 2 -o v.png
# --noise: F32 only, finite only
expect 0 "" -- gen -p "$P" --seed 3 -o l.png --save-latents lat.st -q
cp lat.st i32.st; st_header i32.st 's/"F32"/"I32"/'
expect 4 "is I32; it must be F32" -- gen -p "$P" --noise i32.st -o n.png
cp lat.st nan.st; st_poke nan.st latents 0000c07f
expect 4 "noise must be finite" -- gen -p "$P" --noise nan.st -o n.png
expect 0 "" -- gen -p "$P" --noise lat.st -o n.png -q
[ -f n.png ] && ok || bad "F32 noise: no image"
# only a shape the size decides names -W/-H/--frames; a dtype or a NaN names what is wrong
expect 4 "is I32; it must be F32" -- gen -p "$P" --noise i32.st -o n2.png
grep -q -- "-W/-H" err && bad "a dtype error blames -W/-H/--frames: $(cat err)" || ok
expect 4 "tensor 'latents' holds nan at [0, 0, 0, 0, 0] (element 0)" -- gen -p "$P" --noise nan.st -o n2.png
grep -q -- "-W/-H" err && bad "a NaN error blames -W/-H/--frames: $(cat err)" || ok
expect 4 "shape [1, 48, 1, 8, 4] (1, C, T, h, w) for this size; it has [1, 48, 1, 4, 4]; check -W/-H/--frames" -- gen -p "$P" --noise lat.st -H 128 -o n2.png

# ---------------------------------------------------------------- D14: temporary files
echo "important data" > victim
for i in $(seq 0 20); do ln -sf victim "lat2.st.tmp.$i"; done
expect 0 "" -- gen -p "$P" --seed 3 -o s.png --save-latents lat2.st -q
[ "$(cat victim)" = "important data" ] && [ -f lat2.st ] && [ ! -L lat2.st ] && ok ||
    bad "--save-latents followed a planted symlink: victim '$(head -c 40 victim)'"
ln -s victim link.st
expect 0 "" -- gen -p "$P" --seed 3 -o s2.png --save-latents link.st --overwrite -q
[ "$(cat victim)" = "important data" ] && [ ! -L link.st ] && ok || bad "--overwrite wrote through a symlink"
expect 5 "already exists" -- gen -p "$P" --seed 3 -o s3.png --save-latents lat2.st
ls | grep -v '^lat2.st.tmp.[0-9]*$' | grep -q '\.tmp\.' && bad "temporary files left: $(ls | grep tmp)" || ok
[ "$(stat -c %a lat2.st)" = 644 ] && ok || bad "latents mode $(stat -c %a lat2.st), want 644"

# ---------------------------------------------------------------- D16: the plan counts the VAE
timeout 20 "$bin" info -W 16384 -H 16384 > out 2> err
rc=$?
if [ $rc = 6 ]; then
    grep -q "VAE decode" err && grep -q "smaller -W/-H" err && ok || bad "16384^2: $(cat err)"
else # a machine with that much memory: the plan still shows the decode's size
    grep -Eq "VAE decode ~[0-9.]+ GiB" out && ok || bad "16384^2: rc $rc $(cat err) $(grep 'per rank' out)"
fi
"$bin" info -W 2048 -H 2048 | grep -Eq "VAE decode ~[0-9]{3}\.[0-9] MiB" && ok || bad "2048^2 plan lacks the VAE decode"

# ---------------------------------------------------------------- D17: meta escapes control characters
esc=$(printf 'a red \033]0;pwned\007 circle \033[2J')
expect 0 "" -- gen -p "$esc" --seed 4 -o esc.png -q
"$bin" meta esc.png > meta.txt
if grep -q $'\033\|\007' meta.txt; then bad "meta printed raw control characters"; else ok; fi
grep -qF 'prompt: a red \x1b]0;pwned\x07 circle \x1b[2J' meta.txt && ok || bad "meta escapes: $(grep prompt meta.txt | cat -v)"

# ---------------------------------------------------------------- D18: NUL and truncation
printf 'a red circle\0on a blue background' > nul.txt
expect 4 "NUL byte at offset 12" -- gen -p - -o nul.png < nul.txt
[ ! -e nul.png ] && ok || bad "a NUL prompt wrote nul.png"
for i in $(seq 1500); do printf 'a red circle '; done > long.txt
timeout 300 "$bin" gen -p - --steps 1 -o long.png < long.txt > out 2> err
rc=$?
[ $rc = 0 ] && grep -q "reaches the 4096-token limit" err && ok || bad "long prompt: exit $rc, no truncation warning: $(cat err)"

# ---------------------------------------------------------------- D19, D21: info shares gen's checks; the card
variant v; replace v/model_index.json '{"_class_name":"Cosmos3Pipeline","cosmos3":{"defaults":{"width":7,"height":64,"steps":2}}}'
expect 3 "\"cosmos3.defaults.width\" 7 must be a multiple of 16" -- info -m v
expect 3 "model_index.json" -- gen -m v -p "$P" -o v.png
grep -q -- "--width" err && bad "the card's width is blamed on --width: $(cat err)" || ok
variant v; rm v/$TS
"$bin" mkmodel --preset tiny --layers 1 -o one -q
cp one/$TS v/$TS
expect 3 "is missing" -- info -m v --check
# plain info (no --check) runs gen's load checks: gen's exit code and gen's one-line message
info_like_gen() { # VARIANT SUBSTRING
    expect 3 "$2" -- info -m "$1" || return
    [ ! -s out ] && ok || bad "info -m $1 printed before failing: $(head -3 out)"
    local msg; msg=$(grep '^cosmos3: ' err)
    expect 3 "$2" -- gen -m "$1" -p "$P" -W 64 -H 64 --steps 2 -o v.png || return
    [ "$msg" = "$(grep '^cosmos3: ' err)" ] && ok ||
        bad "info and gen differ on $1: '$msg' vs '$(grep '^cosmos3: ' err)'"
}
info_like_gen v "tensor layers.1.input_layernorm.weight is missing (expected shape [128])"
variant v; st_header v/$TS 's/"layers\.0\.mlp\.up_proj\.weight"/"layers.0.mlp.uq_proj.weight"/ or die'
info_like_gen v "tensor layers.0.mlp.up_proj.weight is missing"
variant v; st_header v/$TS 's/("layers.0.mlp.gate_proj.weight":\{"dtype":"BF16","shape":)\[256,128\]/$1\[128,256\]/ or die'
info_like_gen v "layers.0.mlp.gate_proj.weight has shape [128, 256], expected [256, 128]"
variant v; st_header v/$TS 's/("layers.1.self_attn.to_k.weight":\{"dtype":)"BF16"/$1"F16" / or die'
info_like_gen v "layers.1.self_attn.to_k.weight is F16 but config.json's torch_dtype says BF16"
variant v; st_header v/$TS 's/"BF16"/"F16" /g'
info_like_gen v "but config.json's torch_dtype says BF16"
variant v; st_header v/$VS 's/("decoder.conv_out.weight":\{"dtype":)"F32"/$1"I32"/ or die'
info_like_gen v "decoder.conv_out.weight is I32, which a weight cannot be"
variant v; st_header v/$VS 's/("decoder.conv_out.weight":\{"dtype":"F32","shape":\[)12,/${1}13,/ or die'
info_like_gen v "decoder.conv_out.weight"
variant v; replace v/text_tokenizer/tokenizer.json '{"model":{"type":"BPE","vocab":{"a":0},"merges":[]}'
info_like_gen v "tokenizer.json"
# an FP8 checkpoint: its quantization line, FP8 weights counted at one byte each
"$bin" mkmodel --preset tiny --fp8 -o f8 -q
expect 0 "" -- info -m f8
grep -qx "weights: fp8 e4m3 (ModelOpt, per-tensor scales), step policy: first 3 / last 3 steps 16-bit" out &&
    ok || bad "info on an FP8 checkpoint: no quantization line: $(cat out)"
expect 0 "" -- info -m base
grep -q "^weights: fp8" out && bad "a bf16 checkpoint shows a quantization line" || ok
# an FP8 weight without its scale: the loader's scale check, in info as in gen
rm -rf f8v; cp -al f8 f8v
st_header f8v/$TS 's/"layers\.0\.self_attn\.to_q\.weight_scale"/"layers.0.self_attn.to_q.weight_scalf"/ or die'
info_like_gen f8v "layers.0.self_attn.to_q.weight_scale: missing (an FP8 weight needs it)"
expect 0 "" -- info -m f8 --json
jb() { sed -n "s/.*\"bytes\":{\"und\":\([0-9]*\),\"gen\":\([0-9]*\).*/\1 \2/p" out; }
read -r fu fg < <(jb)
expect 0 "" -- info -m base --json
read -r bu bg < <(jb)
read -r nt fp < <("$bin" info -m f8 --json | sed -n 's/.*"fp8_tensors":\([0-9]*\),"fp8_params":\([0-9]*\).*/\1 \2/p')
# the same geometry: each FP8 weight is one byte where bf16 takes two, plus its two F32 scales
[ -n "$fp" ] && [ "$fp" -gt 0 ] && [ $((bu + bg - fu - fg)) = $((fp - 8 * nt)) ] && ok ||
    bad "FP8 bytes: bf16 $bu+$bg, fp8 $fu+$fg, $fp FP8 weights in $nt tensors"
"$bin" info -m f8 --json | grep -q '"step_policy":{"first_16bit":3,"last_16bit":3}' && ok ||
    bad "info --json lacks the FP8 step policy"

# ---------------------------------------------------------------- D5: Ctrl-C while the model loads
COSMOS3_TEST_LOAD_DELAY=3 "$bin" gen -p "$P" -o cc.png 2> cc.err & pid=$!
sleep 1; kill -INT $pid; wait $pid; rc=$?
[ $rc = 130 ] && [ ! -e cc.png ] && ok || bad "Ctrl-C during the load: exit $rc, $(cat cc.err)"

# ---------------------------------------------------------------- D11: REPL load keeps the model
printf 'load /nonexistent\n%s\n' "$P" | XDG_STATE_HOME="$tmp/state" timeout 60 "$bin" -o repl.png > r.out 2> r.err
grep -q "kept .* loaded" r.err && [ -f repl.png ] && ok || bad "a failed REPL load dropped the model: $(cat r.err)"

# ---------------------------------------------------------------- D20: SIGTERM stops the TUI's run: not exit 0
if command -v tmux >/dev/null && "$bin" --version | grep -q "tui, line edit   yes"; then
    sock=harden$$
    tui_term() { # ARGS...: start the TUI, maybe a run, SIGTERM it; its exit status in tui.rc
        rm -f tui.rc
        tmux -L $sock new-session -d -x 120 -y 40 "cd '$tmp' && '$bin' tui $1; echo \$? > tui.rc; sleep 5"
        local sh; sh=$(tmux -L $sock display -p '#{pane_pid}'); sleep 2.5
        local pid; pid=$(pgrep -P "$sh")
        if [ -n "$2" ]; then tmux -L $sock send-keys -l "$2"; tmux -L $sock send-keys Enter; sleep 2; fi
        [ -n "$pid" ] && kill -TERM "$pid"
        for i in $(seq 50); do [ -s tui.rc ] && break; sleep 0.1; done
        tmux -L $sock kill-server 2>/dev/null
    }
    tui_term "--frames 201 -o tui_vid" "$P"
    [ "$(cat tui.rc 2>/dev/null)" = 143 ] && [ -z "$(ls -a | grep tui_vid)" ] && ok ||
        bad "SIGTERM during a TUI run: exit $(cat tui.rc 2>/dev/null), left: $(ls -a | grep tui_vid)"
    tui_term "" ""
    [ "$(cat tui.rc 2>/dev/null)" = 0 ] && ok || bad "SIGTERM on an idle TUI: exit $(cat tui.rc 2>/dev/null)"
fi

finish harden
