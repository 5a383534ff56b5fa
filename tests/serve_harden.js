// serve_harden.js - the second hardening audit's server findings against a
// running `cosmos3 serve` on the demo model (PORT, PID; node built-ins only,
// loopback only, every loop bounded):
//   bombs     pictures and clips that claim huge sizes or hold many frames:
//             400 in under 2 s, the server's peak RSS grows < 300 MB, /health
//             answers throughout; a long clip is decoded only as far as used
//   form      a 60 MB multipart text field is refused at once (linear time);
//             a prompt of multi-byte UTF-8 characters is kept whole
//   edges     num_frames 1 with a picture, %00 in a path, fps 0.001, size
//             99999x99999: 400 naming the fix
//   load      32 concurrent clients from one address: every answer is a
//             correct result or 429/503 with Retry-After, none reset
//   proxy     behind --trusted-proxy 127.0.0.1 (and --max-per-client 1) the
//             last X-Forwarded-For entry is the client
'use strict';
const net = require('node:net');
const fs = require('node:fs');

const port = Number(process.env.PORT), pid = Number(process.env.PID);
const slow = Number(process.env.SLOW || 1); // a sanitizer build: time bounds scaled
const lib = require('./serve/lib.js');
const check = lib.check;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const request = (opts) => lib.rawRequest(port, opts);
const json = {'Content-Type' : 'application/json'};
const message = (r) => {
    try {
        return JSON.parse(r.body.toString()).error.message;
    } catch {
        return r.body ? r.body.toString().slice(0, 300) : r.error;
    }
};
const status = () => {
    const t = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k) => Number((new RegExp(`${k}:\\s+(\\d+)`).exec(t) || [])[1]);
    return {rss : kb('VmRSS'), hwm : kb('VmHWM')};
};
const dataUrl = (file, mime) => `data:${mime};base64,${fs.readFileSync(file).toString('base64')}`;
const video = (extra) => JSON.stringify(Object.assign(
    {prompt : 'a red circle', size : '64x64', num_frames : 9, num_inference_steps : 2, seed : 1},
    extra));

// /health polled while `work` runs: every answer 200
async function withHealth(work, what) {
    let done = false, bad = 0, n = 0;
    const poll = (async () => {
        while (!done && n < 400) {
            const t0 = Date.now();
            const r = await request({path : '/health', timeout : 10000 * slow});
            n++;
            if (r.status !== 200) {
                bad++;
                console.log(`/health during ${what}: ${r.status || r.error} after ${Date.now() - t0} ms`);
            }
            await sleep(100);
        }
    })();
    const out = await work();
    done = true;
    await poll;
    check(bad === 0 && n > 0, `/health answers 200 throughout ${what}`, `${bad} of ${n} failed`);
    return out;
}

async function bombs() {
    const before = status();
    const cases = [
        ['input_reference', 'bomb16k.png', 'image/png'],
        ['input_reference', 'bomb30k.png', 'image/png'],
        ['image_reference', 'anim16k.webp', 'image/webp'],
        ['video_reference', 'anim60k.webp', 'image/webp'],
    ];
    await withHealth(async () => {
        for (const [field, file, mime] of cases) {
            const t0 = Date.now();
            const r = await request({
                path : '/v1/videos',
                method : 'POST',
                headers : json,
                body : video({[field] : dataUrl(file, mime)})
            });
            const ms = Date.now() - t0;
            check(r.status === 400 && /larger than this use takes/.test(message(r)),
                  `${file} as ${field}: 400 naming the size`, `${r.status || r.error} ${message(r)}`);
            check(ms < 2000 * slow, `${file}: refused in under ${2 * slow} s`, `${ms} ms`);
        }
        // four at once (they aborted the server before)
        const four = await Promise.all([0, 1, 2, 3].map(() => request({
            path : '/v1/videos',
            method : 'POST',
            headers : json,
            body : video({input_reference : dataUrl('anim16k.webp', 'image/webp')})
        })));
        check(four.every((r) => r.status === 400), 'four concurrent WebP bombs: 400 each',
              four.map((r) => r.status || r.error).join(' '));
        // a long clip: only the frames the video uses are decoded
        const t0 = Date.now();
        const r = await request({
            path : '/v1/videos',
            method : 'POST',
            headers : json,
            body : video({video_reference : dataUrl('long.mp4', 'video/mp4'), num_inference_steps : 1})
        });
        check(r.status === 200, 'a long 1024x1024 clip as video_reference is taken',
              `${r.status || r.error} ${message(r)}`);
        check(Date.now() - t0 < 10000 * slow, 'its answer comes without decoding every frame',
              `${Date.now() - t0} ms`);
    }, 'the bombs');
    const after = status();
    check(after.hwm - before.rss < 300 * 1024, 'the server\'s peak RSS grew by less than 300 MB',
          `${before.rss} KiB -> peak ${after.hwm} KiB`);
}

function form(parts, boundary) {
    let b = '';
    for (const [name, value] of parts)
        b += `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
    return b + `--${boundary}--\r\n`;
}

async function multipart() {
    const boundary = 'XyZ' + Date.now();
    const headers = {'Content-Type' : `multipart/form-data; boundary=${boundary}`};
    const body = form([['negative_prompt', 'a '.repeat(30 << 20)], ['prompt', 'x']], boundary);
    const t0 = Date.now();
    const r = await withHealth(
        () => request({path : '/v1/videos', method : 'POST', headers, body, timeout : 60000 * slow}),
        'a 60 MB form');
    const ms = Date.now() - t0;
    check(r.status === 400 && /negative_prompt: at most 32768 bytes/.test(message(r)),
          'a 60 MB text field: 400 naming the field and the cap', `${r.status || r.error} ${message(r)}`);
    check(ms < 20000 * slow, 'a 60 MB text field is refused in linear time (128 s before)', `${ms} ms`);
    // a field whose name is not UTF-8 is refused, not dropped (fuzz_multipart)
    const raw = Buffer.concat([
        Buffer.from(form([['prompt', 'x']], boundary).replace(/--[^-]*--\r\n$/, '')),
        Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="`),
        Buffer.from([0x89, 0x72]), Buffer.from(`"\r\n\r\nv\r\n--${boundary}--\r\n`)
    ]);
    const r3 = await request({path : '/v1/videos', method : 'POST', headers, body : raw});
    check(r3.status === 400 && /not UTF-8/.test(message(r3)), 'a field name that is not UTF-8: 400',
          `${r3.status || r3.error} ${message(r3)}`);
    // multi-byte characters wherever the parser's pieces end
    const p = 'é'.repeat(16000);
    const r2 = await request({
        path : '/v1/videos',
        method : 'POST',
        headers,
        body : form([['prompt', p], ['size', '64x64'], ['num_frames', '5'], ['num_inference_steps', '1']],
                    boundary)
    });
    check(r2.status === 200, 'a 32000-byte prompt of 2-byte characters is taken whole',
          `${r2.status || r2.error} ${message(r2)}`);
}

async function edges() {
    let r = await request({
        path : '/v1/videos',
        method : 'POST',
        headers : json,
        body : video({num_frames : 1, input_reference : dataUrl('ok64.png', 'image/png')})
    });
    check(r.status === 400 && /num_frames: a conditioning picture starts a video/.test(message(r)),
          'num_frames 1 with a picture: 400 at POST', `${r.status} ${message(r)}`);
    r = await request({path : '/v1/videos/video_0123%00/content'});
    check(r.status === 400 && /NUL/.test(message(r)), '%00 in a path: 400', `${r.status} ${message(r)}`);
    r = await request({path : '/v1/videos', method : 'POST', headers : json, body : video({fps : 0.001})});
    check(r.status === 400 && /fps/.test(message(r)), 'fps 0.001: 400', `${r.status} ${message(r)}`);
    r = await request({path : '/v1/videos', method : 'POST', headers : json, body : video({size : '99999x99999'})});
    const m = message(r), eg = Number((/e\.g\. (\d+)/.exec(m) || [])[1]);
    // refused, and any size it suggests is one that is taken (at most 16384; the
    // request is rounded first, as vLLM-Omni does, then held to the server's limit)
    check(r.status === 400 && (eg ? eg <= 16384 : /larger than this server's/.test(m)),
          'size 99999x99999: the suggestion is taken', `${r.status} ${m}`);
}

// 32 clients, one request at a time each, for a bounded count
async function load() {
    const small = JSON.stringify({prompt : 'a red circle', size : '64x64', num_inference_steps : 1});
    let okn = 0, busy = 0, bad = [];
    const client = async (k) => {
        for (let i = 0; i < 4; i++) {
            const r = await request({
                path : '/v1/images/generations',
                method : 'POST',
                headers : json,
                body : small,
                timeout : 120000 * slow
            });
            if (r.status === 200) {
                let png = null;
                try {
                    png = Buffer.from(JSON.parse(r.body.toString()).data[0].b64_json, 'base64');
                } catch {
                }
                if (png && png.slice(1, 4).toString() === 'PNG' && png.readUInt32BE(16) === 64)
                    okn++;
                else
                    bad.push(`client ${k}: 200 without a 64x64 PNG`);
            } else if ((r.status === 429 || r.status === 503) && Number(r.headers['retry-after']) > 0) {
                busy++;
                await sleep(200 * Number(r.headers['retry-after']));
            } else {
                bad.push(`client ${k}: ${r.status || r.error} ${message(r)}`);
            }
        }
    };
    await withHealth(() => Promise.all([...Array(32).keys()].map(client)), 'the load');
    check(bad.length === 0, '32 clients: every answer a result or a busy answer, none reset',
          `${bad.length} bad: ${bad.slice(0, 4).join('; ')}`);
    check(okn > 0, '32 clients: some requests are served', `${okn} served, ${busy} busy`);
    console.log(`load: ${okn} served, ${busy} answered busy, ${bad.length} bad`);
    return busy;
}

// behind a proxy: a request that holds its slot (headers, no body yet)
function hold(xff) {
    return new Promise((resolve) => {
        const s = net.connect({host : '127.0.0.1', port}, () => {
            s.write(`POST /v1/videos HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: ${xff}\r\n` +
                    'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n');
            setTimeout(() => resolve(s), 500);
        });
        s.on('error', () => resolve(s));
    });
}
async function proxy() {
    const s = await hold('10.0.0.1');
    let r = await request({path : '/v1/models', headers : {'X-Forwarded-For' : '10.0.0.1'}});
    check(r.status === 429 && Number(r.headers['retry-after']) > 0,
          'behind the proxy, a second request of 10.0.0.1: 429 with Retry-After', r.status || r.error);
    r = await request({path : '/v1/models', headers : {'X-Forwarded-For' : '10.0.0.1, 10.0.0.2'}});
    check(r.status === 200, 'the last X-Forwarded-For entry is the client (10.0.0.2: 200)',
          r.status || r.error);
    s.destroy();
    await sleep(300);
    r = await request({path : '/v1/models', headers : {'X-Forwarded-For' : '10.0.0.1'}});
    check(r.status === 200, '10.0.0.1 is served once its request ended', r.status || r.error);
}

(async () => {
    const tests = {bombs, multipart, edges, load, proxy};
    for (const name of process.argv.slice(2)) await tests[name]();
    process.exit(lib.summary('serve_harden.js'));
})();
