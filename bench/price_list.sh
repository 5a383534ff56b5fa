#!/usr/bin/env bash
# bench/price_list.sh [BUILD_DIR]: the price list of the speed knobs (issue 34),
# regenerated from scratch on the CPU:
#   1. the demo model: every knob (--cache sea at 0.25 and 0.5, --cache fb,
#      --precision fp8, --attention fp8, combinations) over 60 held-out
#      pictures, judged (colours, shape, place) and compared with the plain
#      picture (PSNR): the --all mode of tests/test_demo_cache.c;
#   2. the tiny goldens (../shared/fixtures/tiny-a, 20 steps from each golden
#      case's initial noise): the final latents' relative L2 against the
#      plain run's and the steps skipped.
# Prints both tables in markdown (README "Speed knobs and what they cost";
# the man page's SPEED AND QUALITY holds the same numbers).
set -eu
build=${1:-build}
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$build/cosmos3
fx=${COSMOS3_FIXTURES:-$src/../shared/fixtures}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OPENBLAS_NUM_THREADS=1 COSMOS3_SRCDIR=$src
[ -x "$bin" ] && [ -x "$build/tests/test_demo_cache" ] || {
    echo "price_list.sh: build first (meson compile -C $build)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "### Demo model (64x64, 20 steps; 60 held-out pictures; time: the denoising loop)"
echo
"$build/tests/test_demo_cache" --all 2>"$tmp/demo.err" || { cat "$tmp/demo.err" >&2; exit 1; }
echo

golden=$fx/tiny-a/golden/e2e.safetensors
[ -f "$golden" ] || { echo "(tiny goldens: $golden not found)"; exit 0; }
echo "### Tiny goldens (tiny-a, the golden cases' noise, 20 steps)"
echo
python3 - "$bin" "$fx/tiny-a/model" "$golden" "$tmp" <<'PY'
import array, json, math, struct, subprocess, sys, time
bin, model, golden, tmp = sys.argv[1:5]

def read_st(path):
    d = open(path, 'rb').read()
    n = struct.unpack('<Q', d[:8])[0]
    h = json.loads(d[8:8 + n])
    return h, d[8 + n:]

def tensor(h, body, key):
    t = h[key]; a, b = t['data_offsets']
    x = array.array('f'); x.frombytes(body[a:b]); return x, t['shape']

def write_st(path, key, x, shape):
    hdr = json.dumps({key: {'dtype': 'F32', 'shape': shape, 'data_offsets': [0, 4 * len(x)]}}).encode()
    hdr += b' ' * (-len(hdr) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(hdr)) + hdr + x.tobytes())

def rel_l2(a, b):
    num = sum((p - q) ** 2 for p, q in zip(a, b)); den = sum(q * q for q in b)
    return math.sqrt(num / den) if den else 0.0

h, body = read_st(golden)
meta = h.get('__metadata__', {})
cases = json.loads(open(golden.replace('e2e.safetensors', 'manifest.json')).read())['sections']['e2e']['cases']
knobs = [('plain', []), ('--cache sea', ['--cache', 'sea']),
         ('--cache sea --cache-threshold 0.5', ['--cache', 'sea', '--cache-threshold', '0.5']),
         ('--cache fb', ['--cache', 'fb']), ('--precision fp8', ['--precision', 'fp8']),
         ('--attention fp8', ['--attention', 'fp8']),
         ('--precision fp8 --attention fp8', ['--precision', 'fp8', '--attention', 'fp8']),
         ('--cache sea --precision fp8 --attention fp8',
          ['--cache', 'sea', '--precision', 'fp8', '--attention', 'fp8'])]
rows = {k: [0, 0, 0.0, 0.0, 0] for k, _ in knobs}  # skipped, steps, rel L2 sum, seconds, cases
plain = {}
for c in cases:
    fl, name = c['flags'], c['name']
    if fl.get('num_frames', 1) != 1: continue
    x, shape = tensor(h, body, name + '.latents_init')
    noise = '%s/%s.noise.safetensors' % (tmp, name)
    write_st(noise, 'latents', x, shape)
    sched = 'karras' if fl.get('use_karras_sigmas') else 'native' if fl.get('use_native_flow_schedule') else 'linear'
    base = [bin, 'gen', '-m', model, '--device', 'cpu', '-p', fl['prompt'], '-n', fl['negative_prompt'],
            '-W', str(fl['width']), '-H', str(fl['height']), '--steps', '20', '--guidance',
            str(fl['guidance_scale']), '--shift', str(fl['flow_shift']), '--schedule', sched,
            '--guidance-interval', 'none', '--noise', noise, '--system-prompt',
            'off' if fl.get('use_system_prompt') is False else 'on', '-q', '--overwrite', '--json']
    for k, extra in knobs:
        lat = '%s/%s.lat.safetensors' % (tmp, name)
        t0 = time.time()
        out = subprocess.run(base + extra + ['-o', '%s/x.png' % tmp, '--save-latents', lat],
                             capture_output=True, text=True)
        if out.returncode: sys.exit('%s %s: %s' % (name, k, out.stderr))
        r = json.loads(out.stdout)
        lh, lb = read_st(lat)
        y, _ = tensor(lh, lb, 'latents')
        if k == 'plain': plain[name] = y
        row = rows[k]
        row[0] += r.get('cache', {}).get('steps_cached', 0); row[1] += 20
        row[2] += rel_l2(y, plain[name]); row[3] += r['seconds']['denoise']; row[4] += 1
print('| knob | steps skipped | denoise time | latents rel L2 vs plain |')
print('|---|---|---|---|')
p = rows['plain']
for k, _ in knobs:
    s, n, e, t, m = rows[k]
    print('| `%s` | %.0f %% | %.2fx | %s |' % (k, 100.0 * s / n if n else 0, t / p[3] if p[3] else 0,
                                            '-' if k == 'plain' else '%.2e' % (e / m if m else 0)))
PY
