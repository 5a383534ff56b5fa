// Helpers for the serve tests: a PNG reader (8-bit RGB, the five filters,
// text chunks), raw HTTP requests, SSE parsing and a check counter.
'use strict';
const http = require('node:http');
const zlib = require('node:zlib');

let passed = 0;
let failed = 0;
function check(cond, what, detail) {
  if (cond) passed++;
  else {
    failed++;
    console.log(`FAIL: ${what}${detail !== undefined ? ': ' + String(detail).slice(0, 600) : ''}`);
  }
  return cond;
}
function summary(name) {
  console.log(`${name}: ${passed} passed, ${failed} failed`);
  return failed === 0 ? 0 : 1;
}

function paeth(a, b, c) {
  const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// Decode a PNG buffer: {width, height, rgb (Buffer W*H*3), texts {key: value}}.
function readPng(buf) {
  const sig = Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]);
  if (buf.length < 8 || !buf.subarray(0, 8).equals(sig)) throw new Error('not a PNG');
  let off = 8, width = 0, height = 0, depth = 0, ctype = 0;
  const idat = [], texts = {};
  while (off + 8 <= buf.length) {
    const len = buf.readUInt32BE(off), type = buf.toString('latin1', off + 4, off + 8);
    const data = buf.subarray(off + 8, off + 8 + len);
    off += 12 + len;
    if (type === 'IHDR') {
      width = data.readUInt32BE(0); height = data.readUInt32BE(4); depth = data[8]; ctype = data[9];
    } else if (type === 'IDAT') idat.push(data);
    else if (type === 'tEXt') {
      const z = data.indexOf(0);
      texts[data.toString('latin1', 0, z)] = data.toString('latin1', z + 1);
    } else if (type === 'iTXt') {
      const z = data.indexOf(0), key = data.toString('latin1', 0, z);
      const comp = data[z + 1];
      let p = data.indexOf(0, z + 3); // language tag
      p = data.indexOf(0, p + 1);     // translated keyword
      const raw = data.subarray(p + 1);
      texts[key] = (comp ? zlib.inflateSync(raw) : raw).toString('utf8');
    } else if (type === 'IEND') break;
  }
  if (depth !== 8 || ctype !== 2) throw new Error(`PNG depth ${depth} colour type ${ctype}, want 8-bit RGB`);
  const raw = zlib.inflateSync(Buffer.concat(idat)), bpp = 3, stride = width * bpp;
  const rgb = Buffer.alloc(stride * height);
  for (let y = 0; y < height; y++) {
    const f = raw[y * (stride + 1)], src = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? rgb[y * stride + x - bpp] : 0, b = y ? rgb[(y - 1) * stride + x] : 0;
      const c = x >= bpp && y ? rgb[(y - 1) * stride + x - bpp] : 0;
      const pred = f === 0 ? 0 : f === 1 ? a : f === 2 ? b : f === 3 ? (a + b) >> 1 : paeth(a, b, c);
      rgb[y * stride + x] = (src[x] + pred) & 255;
    }
  }
  return { width, height, rgb, texts };
}

// One raw HTTP request. opts: {method, path, body (string|Buffer), headers, chunked}.
// Resolves {status, headers, body (string)}; rejects on a socket error.
function request(base, opts) {
  const u = new URL(opts.path, base);
  return new Promise((resolve, reject) => {
    const headers = Object.assign({}, opts.headers || {});
    if (opts.body !== undefined && !opts.chunked && headers['Content-Length'] === undefined)
      headers['Content-Length'] = Buffer.byteLength(opts.body);
    if (opts.body !== undefined && headers['Content-Type'] === undefined) headers['Content-Type'] = 'application/json';
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: opts.method || 'GET',
                               headers, agent: false });
    req.on('response', (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => {
          const buf = Buffer.concat(parts);
          resolve(
              {status : res.statusCode, headers : res.headers, body : buf.toString('utf8'), buf});
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    if (opts.onRequest) opts.onRequest(req);
    if (opts.noBody) return; // the caller ends the request (e.g. after 100 Continue)
    if (opts.body !== undefined) req.end(opts.body);
    else req.end();
  });
}

// One raw HTTP request to 127.0.0.1:port that never rejects (the hardening
// scripts count socket errors as answers). opts: {method, path, body, headers,
// from (the local address), timeout (ms, default 30000)}. Resolves {status,
// headers, body (string), buf} or {error: the code or message}.
function rawRequest(port, opts) {
  return new Promise((resolve) => {
    const headers = Object.assign({}, opts.headers || {});
    if (opts.body !== undefined) headers['Content-Length'] = Buffer.byteLength(opts.body);
    const req = http.request({ host: '127.0.0.1', port, path: opts.path, method: opts.method || 'GET',
                               headers, agent: false, localAddress: opts.from || '127.0.0.1' });
    const timer = setTimeout(() => { req.destroy(new Error('timeout')); }, opts.timeout || 30000);
    const fail = (e) => {
      clearTimeout(timer);
      resolve({ error: e.code || e.message });
    };
    req.on('response', (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => {
        clearTimeout(timer);
        const buf = Buffer.concat(parts);
        resolve({ status: res.statusCode, headers: res.headers, body: buf.toString('utf8'), buf });
      });
      res.on('error', fail);
    });
    req.on('error', fail);
    if (opts.body !== undefined) req.write(opts.body);
    req.end();
  });
}

// Parse an SSE text into [{event, data}].
function parseSse(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = 'message'; const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
    }
    out.push({ event, data: data.join('\n') });
  }
  return out;
}

async function metrics(base) {
  const r = await request(base, { path: '/metrics' });
  const m = {};
  for (const line of r.body.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    m[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return m;
}

// Wait until pred(metrics) holds; false after `seconds`.
async function waitMetrics(base, pred, seconds) {
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    if (pred(await metrics(base))) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

module.exports = { check, summary, readPng, request, rawRequest, parseSse, metrics, waitMetrics };
