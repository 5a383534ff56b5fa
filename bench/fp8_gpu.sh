#!/usr/bin/env bash
# fp8_gpu.sh - issue 23's one GPU call: FP8 correctness (CUDA FP8 path vs the
# CPU reference on a tiny mkmodel --fp8 checkpoint), FP8 vs bf16 quality at
# Nano geometry with 2 layers, and speed (cosmos3 bench, FP8 vs bf16 in the
# same call). Run there from the repo root with DIR = the carried folder:
#   bash DIR/fp8_gpu.sh DIR      (results to $OUT)
set -u
pk=$1
. "$pk/carry.sh"
carry_env "$pk"
bin=$pk/cosmos3 rel=$pk/rel
out=${OUT:-/tmp/out}; mkdir -p "$out"; t=/tmp/f8; mkdir -p $t
log() { echo "== $*"; }
g() { # model precision device steps tag W H
    "$bin" gen -m "$1" --precision "$2" --device "$3" -p "a red cube on a wooden table" -W "${6:-64}" -H "${7:-64}" \
        --steps "$4" --seed 3 --save-latents "$t/$5.st" -o "$t/$5.png" --overwrite -q 2>&1 | tail -2; }
log tiny fp8 checkpoint: CUDA vs CPU
"$bin" mkmodel --preset tiny --fp8 --seed 5 -o $t/f8 -q && "$bin" mkmodel --preset tiny --seed 5 -o $t/b16 -q
for p in auto bf16; do g $t/f8 $p cuda 8 f8_${p}_cuda; g $t/f8 $p cpu 8 f8_${p}_cpu; done
echo "fp8 auto cuda vs cpu: $($rel $t/f8_auto_cuda.st $t/f8_auto_cpu.st)"
echo "fp8 bf16 cuda vs cpu: $($rel $t/f8_bf16_cuda.st $t/f8_bf16_cpu.st)"
echo "cpu: fp8 policy vs bf16: $($rel $t/f8_auto_cpu.st $t/f8_bf16_cpu.st)"
echo "cuda: fp8 policy vs bf16: $($rel $t/f8_auto_cuda.st $t/f8_bf16_cuda.st)"
log nano geometry, 2 layers, 256x256
"$bin" mkmodel --preset nano --layers 2 --seed 7 -o $t/n2 -q || echo "mkmodel nano failed"
for s in 1 20; do
  g $t/n2 auto cuda $s n2_b16_$s 256 256; g $t/n2 fp8 cuda $s n2_f8_$s 256 256
  echo "nano-2L $s step(s): --precision fp8 vs bf16 latents: $($rel $t/n2_f8_$s.st $t/n2_b16_$s.st)"
done
g $t/n2 fp8 cpu 1 n2_f8_cpu_1 256 256
echo "nano-2L 1 step: fp8 CUDA vs fp8 CPU reference: $($rel $t/n2_f8_1.st $t/n2_f8_cpu_1.st)"
rm -rf $t/n2
log speed
for p in bf16 fp8; do
  "$bin" bench --preset nano --layers 9 -W 1280 -H 720 -F 189 --precision $p --skip-vae --json -q > "$out/nano720_$p.json" 2>"$out/nano720_$p.err"; echo "nano 720p/189f 9 layers $p: $(head -c 600 $out/nano720_$p.json)"; tail -2 "$out/nano720_$p.err"
  "$bin" bench --preset super --layers 16 -W 1360 -H 768 --precision $p --skip-vae --json -q > "$out/super_t2i_$p.json" 2>"$out/super_t2i_$p.err"; echo "super T2I 1360x768 16 layers $p: $(head -c 600 $out/super_t2i_$p.json)"; tail -2 "$out/super_t2i_$p.err"
done
