// cosmos3 serve's /v1/videos, driven from tests/test_serve_videos.sh:
//   node videos_test.js MODE   with BASE=http://127.0.0.1:PORT, OUT=folder for the MP4s
// MODE: api      (the OpenAI client's videos.create/retrieve/list/downloadContent/delete,
//                 per-step progress, sync, references, errors)
//       queue    (server started with --queue 1: a full queue, a job cancelled mid-run)
//       keep     (server started with --keep-videos 2: the oldest dropped first)
'use strict';
const fs = require('node:fs');
const {check, summary, request, metrics} = require('./lib.js');

const base = process.env.BASE;
const out = process.env.OUT || '.';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const postJson = (path, body) => request(
    base, {method : 'POST', path, body : typeof body === 'string' ? body : JSON.stringify(body)});
const get = (path) => request(base, {path});
const del = (path) => request(base, {method : 'DELETE', path});
const json = (r) => {
    try {
        return JSON.parse(r.body);
    } catch {
        return {};
    }
};
const errOf = (r) => json(r).error || {};

// Poll a job until it finishes; returns [last object, every progress value seen].
async function poll(id, seconds = 120) {
    const seen = [];
    let o = {};
    for (const t0 = Date.now(); Date.now() - t0 < seconds * 1000;) {
        o = json(await get(`/v1/videos/${id}`));
        if (seen[seen.length - 1] !== o.progress) seen.push(o.progress);
        if (o.status === 'completed' || o.status === 'failed' || !o.status) break;
        await sleep(5);
    }
    return [ o, seen ];
}

// A PNG of w x h (a gradient): the reference picture.
function png(w, h) {
    const zlib = require('node:zlib');
    const raw = Buffer.alloc((w * 3 + 1) * h);
    for (let y = 0; y < h; y++)
        for (let x = 0; x < w; x++) {
            const o = y * (w * 3 + 1) + 1 + x * 3;
            raw[o] = (x * 255 / w) | 0;
            raw[o + 1] = (y * 255 / h) | 0;
            raw[o + 2] = 128;
        }
    const crcTable = [];
    for (let n = 0; n < 256; n++) {
        let c = n;
        for (let k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
        crcTable[n] = c >>> 0;
    }
    const crc = (b) => {
        let c = ~0;
        for (const x of b)
            c = crcTable[(c ^ x) & 255] ^ (c >>> 8);
        return (~c) >>> 0;
    };
    const chunk = (t, d) => {
        const len = Buffer.alloc(4);
        len.writeUInt32BE(d.length);
        const td = Buffer.concat([ Buffer.from(t, 'latin1'), d ]);
        const c = Buffer.alloc(4);
        c.writeUInt32BE(crc(td));
        return Buffer.concat([ len, td, c ]);
    };
    const ihdr = Buffer.alloc(13);
    ihdr.writeUInt32BE(w, 0);
    ihdr.writeUInt32BE(h, 4);
    ihdr[8] = 8;
    ihdr[9] = 2;
    return Buffer.concat([
        Buffer.from([ 137, 80, 78, 71, 13, 10, 26, 10 ]), chunk('IHDR', ihdr),
        chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))
    ]);
}

// The acceptance settings: 17 frames of 64x64, 2 steps, seed 5 (as test_serve_videos.sh's gen run)
const ACCEPT = {
    prompt : 'a red fox runs across a snowy field',
    size : '64x64',
    num_frames : 17,
    num_inference_steps : 2,
    seed : 5
};

async function api() {
    const OpenAI = require('openai');
    const c =
        new OpenAI({baseURL : base + '/v1', apiKey : 'unused', maxRetries : 0, timeout : 120000});
    // the client: multipart create, retrieve, list, downloadContent, delete
    const v = await c.videos.create({...ACCEPT});
    check(v.object === 'video' && /^video_/.test(v.id) &&
              [ 'queued', 'in_progress' ].includes(v.status) && typeof v.created_at === 'number' &&
              v.progress === 0 && v.size === '64x64',
          'videos.create: a queued job', JSON.stringify(v));
    let r = await c.videos.retrieve(v.id);
    for (let i = 0; i < 2000 && r.status !== 'completed' && r.status !== 'failed'; i++) {
        await sleep(20);
        r = await c.videos.retrieve(v.id);
    }
    check(r.status === 'completed' && r.progress === 100 && r.num_frames === 17 && r.seed === 5,
          'videos.retrieve: completed, progress 100', JSON.stringify(r));
    const page = await c.videos.list();
    check(page.data.some((x) => x.id === v.id), 'videos.list holds the job',
          JSON.stringify(page.data.map((x) => x.id)));
    const content = await c.videos.downloadContent(v.id);
    const mp4 = Buffer.from(await content.arrayBuffer());
    check(mp4.subarray(4, 8).toString() === 'ftyp' && mp4.indexOf('moov') < mp4.indexOf('mdat'),
          'downloadContent: an MP4 with its index first (faststart)',
          mp4.subarray(0, 16).toString('hex'));
    check(mp4.includes('a red fox runs across a snowy field') && mp4.includes('Seed: 5,'),
          'the MP4 holds the prompt and seed');
    fs.writeFileSync(`${out}/served.mp4`, mp4);
    const d = await c.videos.delete(v.id);
    check(d.deleted === true && d.id === v.id && d.object === 'video.deleted', 'videos.delete',
          JSON.stringify(d));
    r = await get(`/v1/videos/${v.id}`);
    check(r.status === 404 && errOf(r).type === 'not_found_error', 'a deleted video: 404',
          r.status);

    // per-step progress: 6 steps at 256x256 over raw JSON, polled
    let p = await postJson(
        '/v1/videos',
        {prompt : 'a fox', size : '256x256', num_frames : 17, num_inference_steps : 6, seed : 2});
    const id = json(p).id;
    check(p.status === 200 && json(p).status === 'queued', 'POST /v1/videos (JSON): queued',
          p.body);
    const [last, seen] = await poll(id);
    const inner = seen.filter((x) => x > 0 && x < 100);
    const rising = seen.every((x, i) => i === 0 || x >= seen[i - 1]);
    check(last.status === 'completed' && rising && inner.length >= 4 &&
              seen[seen.length - 1] === 100,
          'progress rises step by step (0 < p < 100 at least 4 times, then 100)',
          JSON.stringify(seen));
    check(last.step === 6 && last.steps === 6, 'the object counts the steps', JSON.stringify(last));
    r = await get(`/v1/videos/${id}/content`);
    check(r.status === 200 && r.headers['content-type'] === 'video/mp4', 'GET content: video/mp4',
          r.status);

    // sync: the MP4 bytes in the answer
    r = await request(base, {
        method : 'POST',
        path : '/v1/videos/sync',
        binary : true,
        body : JSON.stringify({...ACCEPT, num_frames : 9})
    });
    check(r.status === 200 && r.headers['content-type'] === 'video/mp4' && r.buf &&
              r.buf.subarray(4, 8).toString() === 'ftyp',
          'POST /v1/videos/sync: MP4 bytes', r.status);
    if (r.buf) fs.writeFileSync(`${out}/sync.mp4`, r.buf);

    // references: decoded and handed to the engine (image-to-video, video-to-video)
    const pic = png(64, 64);
    const vi = await c.videos.create({
        ...ACCEPT,
        num_frames : 9,
        input_reference : await OpenAI.toFile(pic, 'ref.png', {type : 'image/png'})
    });
    const [vr] = await poll(vi.id);
    check(vr.status === 'completed', 'input_reference (multipart PNG): completed',
          JSON.stringify(vr));
    p = await postJson('/v1/videos', {
        ...ACCEPT,
        num_frames : 9,
        image_reference : {image_url : 'data:image/png;base64,' + pic.toString('base64')}
    });
    check(p.status === 200 && (await poll(json(p).id))[0].status === 'completed',
          'image_reference data URL', p.body);
    p = await postJson(
        '/v1/videos',
        {...ACCEPT, video_reference : 'data:video/mp4;base64,' + mp4.toString('base64')});
    check(p.status === 200 && (await poll(json(p).id))[0].status === 'completed',
          'video_reference data URL (an MP4)', p.body);

    // errors
    const cases = [
        [ 'no prompt', {size : '64x64'}, 'prompt', /required/],
        [ 'unknown field', {prompt : 'a', output : '/tmp/x'}, 'output', /unknown field/],
        // num_frames 8 is rounded to 9, as vLLM-Omni does (test_vllm_omni.sh); 0 is refused
        [ 'num_frames 0', {prompt : 'a', size : '64x64', num_frames : 0}, 'num_frames', /1\.\.4097/],
        [ 'size', {prompt : 'a', size : 'big'}, 'size', /WIDTHxHEIGHT/],
        [
            'a path is no reference', {prompt : 'a', image_reference : {image_url : '/etc/passwd'}},
            'image_reference', /data URL/
        ],
        [
            'an http URL is no reference',
            {prompt : 'a', image_reference : 'http://example.com/x.png'}, 'image_reference',
            /fetches no URLs/
        ],
        [
            'file_id', {prompt : 'a', image_reference : {file_id : 'file_1'}}, 'image_reference',
            /keeps no files/
        ],
        [
            'junk bytes',
            {prompt : 'a', image_reference : 'data:image/png;base64,aGVsbG8gd29ybGQ='},
            'image_reference', /not a picture or clip/
        ],
        [
            'two references', {
                prompt : 'a',
                image_reference : 'data:image/png;base64,' + pic.toString('base64'),
                video_reference : 'data:video/mp4;base64,' + mp4.toString('base64')
            },
            'video_reference', /one of/
        ],
    ];
    for (const [what, body, param, re] of cases) {
        const e = await postJson('/v1/videos', body);
        check(e.status === 400 && errOf(e).param === param && re.test(errOf(e).message || ''),
              `${what}: 400 naming ${param}`, `${e.status} ${e.body}`);
    }
    r = await request(base, {
        method : 'POST',
        path : '/v1/videos',
        body : 'prompt=a',
        headers : {'Content-Type' : 'text/plain'}
    });
    check(r.status === 415, 'text/plain: 415', r.status);
    r = await get('/v1/videos/video_nope/content');
    check(r.status === 404, 'unknown id: 404', r.status);
    r = await request(base, {method : 'PUT', path : '/v1/videos', body : '{}'});
    check(r.status === 405, 'PUT /v1/videos: 405', r.status);
}

async function queue() {
    // a long job runs, one waits, the third is refused; then the running one is cancelled
    const long = {prompt : 'a fox', size : '256x256', num_frames : 17, num_inference_steps : 400};
    const a = json(await postJson('/v1/videos', long));
    let o = {};
    for (let i = 0; i < 1000 && o.status !== 'in_progress'; i++) {
        o = json(await get(`/v1/videos/${a.id}`));
        await sleep(10);
    }
    const b = json(await postJson('/v1/videos', long));
    const full = await postJson('/v1/videos', long);
    check(o.status === 'in_progress' && b.status === 'queued', 'one running, one waiting',
          `${o.status} ${b.status}`);
    check(full.status === 429 && /queue is full/.test(errOf(full).message) &&
              full.headers['retry-after'],
          'a full queue: 429 with Retry-After', `${full.status} ${full.body}`);
    const before = (await metrics(base)).cosmos3_cancelled_total || 0;
    let r = await del(`/v1/videos/${a.id}`);
    check(r.status === 200 && json(r).deleted === true, 'DELETE a running job', r.body);
    r = await del(`/v1/videos/${b.id}`);
    check(r.status === 200, 'DELETE a queued job', r.body);
    const after = (await metrics(base)).cosmos3_cancelled_total || 0;
    check(after === before + 2, 'both cancelled (metrics)', `${before} -> ${after}`);
    // the engine is free again: a short job completes
    const s = json(await postJson(
        '/v1/videos', {prompt : 'a fox', size : '64x64', num_frames : 5, num_inference_steps : 1}));
    check(s.id && (await poll(s.id))[0].status === 'completed',
          'the next job completes after the cancel', JSON.stringify(s));
    r = await get(`/v1/videos/${a.id}`);
    check(r.status === 404, 'the cancelled job is gone', r.status);
}

async function keep() {
    const ids = [];
    for (let i = 0; i < 3; i++) {
        const v = json(await postJson(
            '/v1/videos',
            {prompt : 'a fox', size : '64x64', num_frames : 5, num_inference_steps : 1, seed : i}));
        await poll(v.id);
        ids.push(v.id);
    }
    const l = json(await get('/v1/videos'));
    check(l.object === 'list' && l.data.length === 2 && l.data[0].id === ids[2] &&
              l.data[1].id === ids[1] && l.first_id === ids[2] && l.last_id === ids[1],
          'two kept, newest first', JSON.stringify(l.data.map((x) => x.id)));
    const r = await get(`/v1/videos/${ids[0]}/content`);
    check(r.status === 404 && /keeps the last 2/.test(errOf(r).message), 'the oldest was dropped',
          r.body);
}

const modes = {
    api,
    queue,
    keep
};
modes[process.argv[2]]().then(() => process.exit(summary(`videos ${process.argv[2]}`)), (e) => {
    console.log('FAIL: exception', e && e.stack);
    process.exit(1);
});
