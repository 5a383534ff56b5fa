// The server's limits against one hostile client (node built-ins only; run by
// tests/test_serve_limits.sh): PORT KEY in the environment.
//   auth      401 without or with a wrong Bearer key, 200 with it; /health open
//   types     415 for text/plain, form and missing Content-Type; JSON with a charset passes
//   cost      400 naming --max-cost for a request over it; a small one is served
//   flood     one address holds 64 idle connections: another is still served at once,
//             and most of the 64 are refused by the per-address limit
//   trickle   a header line every 0.3 s: closed at the header deadline
'use strict';
const net = require('node:net');

const port = Number(process.env.PORT), key = process.env.KEY;
const lib = require('./serve/lib.js');
const check = lib.check;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// One request from localAddress opts.from; resolves {status, headers, body} or {error}.
const request = (opts) => lib.rawRequest(port, Object.assign({timeout : 20000}, opts));
const bearer = (k) => ({Authorization : `Bearer ${k}`});
const json = {
    'Content-Type' : 'application/json'
};
const small =
    JSON.stringify({prompt : 'a red circle', size : '64x64', num_inference_steps : 2, seed : 1});
const message = (r) => {
    try {
        return JSON.parse(r.body).error.message;
    } catch {
        return r.body || r.error;
    }
};

// A raw socket from `from` that sends `text` and then nothing; resolves when
// connected, records when the server closes it.
function idle(from, text) {
    return new Promise((resolve) => {
        const s = net.connect({host : '127.0.0.1', port, localAddress : from});
        const st = {sock : s, closed : false, t0 : Date.now(), tClose : 0, data : ''};
        s.on('connect', () => {
            s.write(text);
            resolve(st);
        });
        s.on('data', (d) => { st.data += d; });
        s.on('close', () => {
            st.closed = true;
            st.tClose = Date.now();
        });
        s.on('error', () => {
            if (!st.closed) {
                st.closed = true;
                st.tClose = Date.now();
            }
            resolve(st);
        });
    });
}

async function auth() {
    let r = await request({path : '/health'});
    check(r.status === 200, '/health needs no key', r.status);
    r = await request({path : '/v1/models'});
    check(r.status === 401 && /Bearer/.test(r.headers['www-authenticate'] || ''),
          'no key: 401 with WWW-Authenticate', `${r.status} ${JSON.stringify(r.headers)}`);
    check(/Authorization: Bearer KEY/.test(message(r)), '401 names the header', message(r));
    r = await request({path : '/v1/models', headers : bearer(key + 'x')});
    check(r.status === 401, 'wrong key: 401', r.status);
    r = await request({path : '/v1/models', headers : {Authorization : key}});
    check(r.status === 401, 'key without Bearer: 401', r.status);
    r = await request({path : '/metrics'});
    check(r.status === 401, '/metrics without key: 401', r.status);
    r = await request(
        {path : '/v1/images/generations', method : 'POST', headers : json, body : small});
    check(r.status === 401, 'POST without key: 401', r.status);
    r = await request({path : '/v1/models', headers : bearer(key)});
    check(r.status === 200, 'right key: 200', `${r.status} ${r.body}`);
}

async function types() {
    for (const t of ['text/plain', 'application/x-www-form-urlencoded',
                     'multipart/form-data; boundary=x', 'application/jsonp', undefined]) {
        const headers = Object.assign(bearer(key), t ? {'Content-Type' : t} : {});
        const r = await request(
            {path : '/v1/images/generations', method : 'POST', headers, body : small});
        check(r.status === 415 && /application\/json/.test(message(r)), `Content-Type ${t}: 415`,
              `${r.status} ${message(r)}`);
    }
    const r = await request({
        path : '/v1/images/generations',
        method : 'POST',
        headers : Object.assign(bearer(key), {'Content-Type' : 'Application/JSON; charset=utf-8'}),
        body : small
    });
    check(r.status === 200 && JSON.parse(r.body).data.length === 1, 'JSON with a charset: 200',
          `${r.status} ${r.body}`);
}

async function cost() {
    const body =
        JSON.stringify({prompt : 'a red circle', size : '64x64', num_inference_steps : 300});
    let r = await request({
        path : '/v1/images/generations',
        method : 'POST',
        headers : Object.assign(bearer(key), json),
        body
    });
    check(r.status === 400 && /--max-cost/.test(message(r)) && /costs 1\.2 /.test(message(r)),
          '64x64 x 300 steps over --max-cost 1: 400 naming it', `${r.status} ${message(r)}`);
    const many =
        JSON.stringify({prompt : 'a red circle', size : '64x64', num_inference_steps : 100, n : 3});
    r = await request({
        path : '/v1/images/generations',
        method : 'POST',
        headers : Object.assign(bearer(key), json),
        body : many
    });
    check(r.status === 400 && /n 3/.test(message(r)), 'n counts in the cost',
          `${r.status} ${message(r)}`);
}

async function flood() {
    const hog = [];
    for (let i = 0; i < 64; i++)
        hog.push(await idle('127.0.0.2', 'POST /v1/images/generations HTTP/1.1\r\nHost: x\r\n'));
    await sleep(300);
    const t0 = Date.now();
    let r = await request({path : '/health', timeout : 5000});
    check(r.status === 200, 'a second client gets /health while the first holds 64 connections',
          r.status || r.error);
    r = await request({
        path : '/v1/images/generations',
        method : 'POST',
        headers : Object.assign(bearer(key), json),
        body : small,
        timeout : 15000
    });
    check(r.status === 200, 'a second client gets an image while the first holds 64 connections',
          `${r.status || r.error} ${message(r)}`);
    check(Date.now() - t0 < 15000, 'served promptly', Date.now() - t0);
    const refused = hog.filter((s) => s.closed && s.tClose - s.t0 < 1500).length;
    check(refused >= 64 - 16, 'the per-address socket limit (2 x --max-per-client 8) refuses the hog\'s extra connections',
          refused);
    for (const s of hog)
        s.sock.destroy();
}

async function trickle() {
    const s = await idle('127.0.0.3', 'POST /v1/images/generations HTTP/1.1\r\n');
    let n = 0;
    while (!s.closed && Date.now() - s.t0 < 12000) {
        await sleep(300);
        if (!s.closed) s.sock.write(`X-Slow-${n++}: 1\r\n`);
    }
    const held = (s.tClose || Date.now()) - s.t0;
    check(s.closed && held >= 1500 && held < 6000, 'a trickled header is cut at the deadline (2 s)',
          `${s.closed} ${held} ms`);
    const m = await request({path : '/metrics', headers : bearer(key)});
    const cut = Number((/cosmos3_connections_cut_total (\d+)/.exec(m.body) || [])[1]);
    check(cut >= 1, 'metrics count the cut connection', cut);
    // a silent connection too
    const q = await idle('127.0.0.3', '');
    while (!q.closed && Date.now() - q.t0 < 12000)
        await sleep(100);
    check(q.closed && q.tClose - q.t0 < 6000, 'a silent connection is cut at the deadline',
          `${q.closed} ${q.tClose - q.t0}`);
}

(async () => {
    const modes = {auth, types, cost, flood, trickle};
    for (const m of process.argv.slice(2))
        await modes[m]();
    process.exit(lib.summary(`serve_limits ${process.argv.slice(2).join(' ')}`));
})();
