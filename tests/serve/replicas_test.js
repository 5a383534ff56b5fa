// serve --replicas 2 --max-batch 4 under load (issue 32's acceptance), driven by
// tests/test_serve_replicas.sh, which judges and compares the files this writes.
//
//   node replicas_test.js SPECS_JSON OUTDIR
//
// SPECS_JSON: {blockers: [...], images: [...], cancel: {...}, clips: [...]}, each
// image {prompt, seed, steps, guidance?, via: "client"|"curl"}, each clip
// {prompt, seed, frames, via}. In order:
//   1. the two blockers (another batch key: more steps) keep both replicas busy:
//      /health shows two requests running at once on different replicas;
//   2. the request to cancel, then the images and the clips are sent while they
//      run (the OpenAI JS client and curl), so the first replica free takes the
//      cancel one with three images as one batch;
//   3. once /health shows it in a batch with others, its client leaves (a
//      cancel mid-batch), and a malformed request is sent (refused 400 at once);
//   4. every image answered 200 (written as OUTDIR/img_SEED.png) with its
//      timings, the clips completed and downloaded (OUTDIR/clip_SEED.mp4);
//      /metrics: a batch of 2 or more, the cancel, both replicas used.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { execFile } = require('node:child_process');
const { check, summary, request, metrics } = require('./lib.js');

const base = process.env.BASE;
const specs = JSON.parse(process.argv[2]);
const outdir = process.argv[3];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const health = async () => JSON.parse((await request(base, { path: '/health' })).body);

function curl(args) {
  return new Promise((resolve) => {
    execFile('curl', ['-s', '-S', '-w', '\n%{http_code}', ...args], { maxBuffer: 64 << 20 },
             (err, stdout, stderr) => {
               const i = stdout.lastIndexOf('\n');
               resolve({ status: Number(stdout.slice(i + 1)), body: stdout.slice(0, i), err: err && stderr });
             });
  });
}

function imageBody(s) {
  const b = { prompt: s.prompt, seed: s.seed, num_inference_steps: s.steps };
  if (s.guidance) b.guidance_scale = s.guidance;
  return b;
}

// One image request: {status, json}
async function image(client, s) {
  if (s.via === 'client') {
    try {
      const r = await client.images.generate(imageBody(s));
      return { status: 200, json: r };
    } catch (e) {
      return { status: e.status || 0, json: { error: String(e) } };
    }
  }
  const r = await curl(['-X', 'POST', `${base}/v1/images/generations`, '-H', 'Content-Type: application/json',
                        '-d', JSON.stringify(imageBody(s))]);
  let json = null;
  try { json = JSON.parse(r.body); } catch { json = { error: r.body.slice(0, 300) }; }
  return { status: r.status, json };
}

// One clip: created, polled to its end, downloaded; {status, id, file}
async function clip(client, s) {
  const body = { prompt: s.prompt, seed: s.seed, num_frames: s.frames };
  let id;
  if (s.via === 'client') {
    const v = await client.videos.create(body);
    id = v.id;
  } else {
    const r = await curl(['-X', 'POST', `${base}/v1/videos`, '-H', 'Content-Type: application/json',
                          '-d', JSON.stringify(body)]);
    id = r.status === 200 ? JSON.parse(r.body).id : null;
    if (!id) return { status: r.status, error: r.body };
  }
  let v;
  for (let k = 0; k < 6000; k++) {
    v = s.via === 'client' ? await client.videos.retrieve(id)
                           : JSON.parse((await curl([`${base}/v1/videos/${id}`])).body);
    if (v.status === 'completed' || v.status === 'failed') break;
    await sleep(100);
  }
  if (v.status !== 'completed') return { status: 500, error: JSON.stringify(v) };
  const file = path.join(outdir, `clip_${s.seed}.mp4`);
  if (s.via === 'client') {
    const c = await client.videos.downloadContent(id);
    fs.writeFileSync(file, Buffer.from(await c.arrayBuffer()));
  } else {
    await curl(['-o', file, `${base}/v1/videos/${id}/content`]);
  }
  return { status: 200, id, file, video: v };
}

async function main() {
  const OpenAI = require('openai');
  const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 600000 });

  // 1. both replicas busy with a blocker each
  const blockers = specs.blockers.map((s) => image(client, s));
  let both = false;
  for (let k = 0; k < 400 && !both; k++) {
    const h = await health();
    const busy = h.replicas.filter((r) => r.state === 'busy' && r.in_flight.length > 0);
    both = busy.length === 2 && busy[0].in_flight[0].seed !== busy[1].in_flight[0].seed;
    if (!both) await sleep(25);
  }
  check(both, 'two requests running at the same time on different replicas (/health)');

  // 2. the one to cancel, then the rest, while the blockers run
  let xreq = null;
  const x = request(base, { method: 'POST', path: '/v1/images/generations',
                            body: JSON.stringify(imageBody(specs.cancel)), onRequest: (q) => { xreq = q; } })
    .then((r) => ({ status: r.status }), (e) => ({ status: 'gone', code: e.code }));
  await sleep(100); // it is queued first
  const images = specs.images.map((s) => image(client, s));
  const clips = specs.clips.map((s) => clip(client, s));

  // 3. cancel it once it runs in a batch with others; a malformed request meanwhile
  let mates = null, malformed = null;
  for (let k = 0; k < 6000 && !mates; k++) {
    const h = await health();
    for (const r of h.replicas) {
      const seeds = r.in_flight.map((i) => i.seed);
      if (r.state === 'busy' && seeds.includes(specs.cancel.seed) && seeds.length >= 2) {
        xreq.destroy();
        mates = seeds.filter((s) => s !== specs.cancel.seed);
        const bad = await request(base, { method: 'POST', path: '/v1/images/generations',
                                          body: '{"prompt": "a red circle", "size": "64x", "seed": 5' });
        const bad2 = await request(base, { method: 'POST', path: '/v1/images/generations',
                                           body: JSON.stringify({ prompt: 'a red circle', size: '64x' }) });
        malformed = [bad.status, bad2.status, bad2.body];
        break;
      }
    }
    if (!mates) await sleep(20);
  }
  check(mates && mates.length >= 1, 'the request to cancel ran in a batch with others', JSON.stringify(mates));
  check(malformed && malformed[0] === 400 && malformed[1] === 400 && /size/.test(malformed[2]),
        'malformed requests refused 400 while the batch runs', JSON.stringify(malformed));
  const xr = await x;
  check(xr.status === 'gone', 'the cancelled request has no answer', JSON.stringify(xr));

  // 4. every other result
  const all = specs.blockers.concat(specs.images);
  const res = await Promise.all(blockers.concat(images));
  const replicasUsed = new Set();
  let maxBatch = 0;
  res.forEach((r, i) => {
    const s = all[i];
    check(r.status === 200 && r.json.data && r.json.data.length === 1, `image seed ${s.seed} (${s.via}): 200`,
          `${r.status} ${JSON.stringify(r.json).slice(0, 300)}`);
    if (r.status !== 200 || !r.json.data) return;
    const t = r.json.timings || {};
    check(['queue', 'tokenize', 'und', 'denoise', 'vae', 'encode', 'total'].every((k) => t[k] >= 0) &&
          t.batch_size >= 1 && t.replica >= 0, `image seed ${s.seed}: timings`, JSON.stringify(t));
    check(r.json.data[0].seed === s.seed, `image seed ${s.seed}: its seed`, r.json.data[0].seed);
    replicasUsed.add(t.replica);
    maxBatch = Math.max(maxBatch, t.batch_size || 0);
    fs.writeFileSync(path.join(outdir, `img_${s.seed}.png`), Buffer.from(r.json.data[0].b64_json, 'base64'));
  });
  check(replicasUsed.size === 2, 'images answered by both replicas (timings.replica)', [...replicasUsed].join(','));
  check(maxBatch >= 2, 'a batch of 2 or more (timings.batch_size)', maxBatch);
  if (mates)
    for (const m of mates)
      check(res[all.findIndex((s) => s.seed === m)].status === 200, `seed ${m}, batched with the cancelled one, completed`);
  const cl = await Promise.all(clips);
  cl.forEach((c, i) => {
    check(c.status === 200 && fs.existsSync(c.file || ''), `clip seed ${specs.clips[i].seed} (${specs.clips[i].via}): completed and downloaded`,
          c.error);
    if (c.video) check(c.video.timings && c.video.timings.denoise > 0 && c.video.timings.batch_size >= 1,
                       `clip seed ${specs.clips[i].seed}: timings in the video object`, JSON.stringify(c.video.timings));
  });

  const m = await metrics(base);
  const count = m.cosmos3_batch_size_count, ones = m['cosmos3_batch_size_bucket{le="1"}'];
  check(count - ones >= 1, '/metrics: a batch of 2 or more', `${ones} of ${count} of size 1`);
  check(m['cosmos3_replica_requests_total{replica="0"}'] > 0 && m['cosmos3_replica_requests_total{replica="1"}'] > 0,
        '/metrics: both replicas ran requests');
  check(m.cosmos3_cancelled_total === 1, '/metrics: one cancelled', m.cosmos3_cancelled_total);
  check(m['cosmos3_requests_total{endpoint="/v1/images/generations",code="400"}'] === 2, '/metrics: two answered 400');
  check(m['cosmos3_job_stage_seconds_count{stage="denoise"}'] >= all.length + specs.clips.length,
        '/metrics: per-stage histograms', m['cosmos3_job_stage_seconds_count{stage="denoise"}']);
  const h = await health();
  check(h.replicas.length === 2 && h.replicas.every((r) => r.state === 'idle' && r.batches > 0),
        '/health: two replicas, idle, each ran batches', JSON.stringify(h.replicas));
  return summary('replicas');
}

main().then((rc) => process.exit(rc), (e) => { console.log(`FAIL: ${e.stack || e}`); process.exit(1); });
