// A Node.js workload for the malloc test (crates/ebbtide-malloc/tests/real_programs.rs), run
// unmodified under the caller's malloc: V8's heap lives in its own pages, but Node's native
// side allocates through malloc (ArrayBuffer backing stores, Buffers, zlib's streams, the
// crypto and JSON machinery, every worker thread's isolate and libuv). Deterministic output:
// counts and digests only.
'use strict';
const crypto = require('crypto');
const zlib = require('zlib');
const { Worker } = require('worker_threads');

const digest = (s) => crypto.createHash('sha256').update(s).digest('hex').slice(0, 16);

// Objects, maps, strings, JSON.
const m = new Map();
for (let i = 0; i < 200000; i++) m.set('k' + i, { i, s: 'v'.repeat(i % 40), a: [i, i * 2] });
for (let i = 0; i < 200000; i += 3) m.delete('k' + i);
const json = JSON.stringify([...m.values()].slice(0, 50000));
console.log('map', m.size, 'json', json.length, digest(json));
const back = JSON.parse(json);
console.log('parsed', back.length, back[12345].s.length);

// Buffers and ArrayBuffers of many sizes (their memory comes from malloc/calloc).
let bufs = [];
let h = crypto.createHash('sha256');
for (let i = 0; i < 20000; i++) {
  const b = Buffer.alloc(16 + ((i * 7919) % 70000), i & 255);
  h.update(b.subarray(0, 64));
  bufs.push(b);
  if (bufs.length > 500) bufs = bufs.slice(250);
}
const ta = new Float64Array(1 << 20).map((_, i) => Math.sin(i));
console.log('buffers', digest(h.digest('hex')), 'typed', ta.length, ta[12345].toFixed(6));

// zlib round trips, synchronous and through the thread pool.
const text = Buffer.from(Array.from({ length: 200000 }, (_, i) => `line ${i} ${(i * 31) % 977}\n`).join(''));
const gz = zlib.gzipSync(text, { level: 6 });
console.log('gzip', zlib.gunzipSync(gz).equals(text), digest(zlib.inflateRawSync(zlib.deflateRawSync(text))));

// Regular expressions and sorting.
const words = text.toString().match(/\d+\n/g);
words.sort();
console.log('regex', words.length, digest(words.slice(0, 1000).join('')));

// Worker threads: each builds and digests its own data; results are gathered in order.
const src = `
const { parentPort, workerData } = require('worker_threads');
const crypto = require('crypto');
const a = [];
for (let i = 0; i < 100000; i++) a.push({ n: i * workerData, t: 'w' + (i % 97) });
const s = JSON.stringify(a);
parentPort.postMessage(crypto.createHash('sha256').update(s).digest('hex').slice(0, 16));
`;
Promise.all([1, 2, 3, 4].map((n) => new Promise((res, rej) => {
  const w = new Worker(src, { eval: true, workerData: n });
  w.on('message', res);
  w.on('error', rej);
}))).then((r) => {
  zlib.gzip(text, (err, out) => {
    if (err) throw err;
    console.log('workers', r.join(' '));
    console.log('async gzip', zlib.gunzipSync(out).length);
    console.log('done');
  });
});
