// Hugging Face `tokenizers` (npm, the Rust library through its Node binding) side of
// bench/tokenizer/run.sh.
//   node hf_bench.js make-text CORPUS.jsonl SOURCE_DIR OUT.txt
//       writes the benchmark text: English (Debian's license texts), C code (the engine's
//       sources) and Chinese (the corpus' cjk cases), about 1 MiB, deterministic
//   node hf_bench.js bench TOKENIZER.json TEXT.txt IDS.bin ROUNDS
//       loads the tokenizer, encodes TEXT's documents (no special tokens) ROUNDS times
//       on one thread, writes the ids (int32 little-endian) and prints "hf load_ms L best_s S"
//   node hf_bench.js load-once TOKENIZER.json
//       only Tokenizer.fromFile, once, in this fresh process (the library already
//       required, as libdse is linked): prints "load_ms L"
'use strict';
process.env.TOKENIZERS_PARALLELISM = 'false';
process.env.RAYON_NUM_THREADS = '1';
const fs = require('fs');
const path = require('path');

function listC(dir) {
  let out = [];
  for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) out = out.concat(listC(p));
    else if (e.name.endsWith('.c') || e.name.endsWith('.h')) out.push(p);
  }
  return out;
}

function makeText(corpus, srcDir, out) {
  const target = 400 * 1024;
  let en = '';
  const lic = '/usr/share/common-licenses';
  for (const f of ['GPL-3', 'LGPL-3', 'Apache-2.0', 'GPL-2', 'LGPL-2.1', 'MPL-2.0', 'GFDL-1.3', 'Artistic']) {
    const p = path.join(lic, f);
    if (fs.existsSync(p) && en.length < target) en += fs.readFileSync(p, 'utf8') + '\n';
  }
  let code = '';
  for (const f of listC(path.join(srcDir, 'engine', 'src'))) {
    if (code.length >= target) break;
    code += fs.readFileSync(f, 'utf8') + '\n';
  }
  const cjk = fs.readFileSync(corpus, 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l))
    .filter((c) => c.category === 'cjk').map((c) => c.text);
  let zh = '';
  for (let i = 0; Buffer.byteLength(zh) < target / 2; i++) zh += cjk[i % cjk.length] + (i % 3 === 2 ? '\n' : '');
  // documents of up to ~4 KiB cut at line ends, interleaved so the mix is even; they
  // are separated by NUL bytes in the file and encoded one call each (as prompts are)
  const docs = (s) => {
    const out = [];
    let cur = '';
    for (const line of s.split(/(?<=\n)/)) {
      if (cur && cur.length + line.length > 4096) { out.push(cur); cur = ''; }
      cur += line;
    }
    if (cur) out.push(cur);
    return out;
  };
  const parts = [en, code, zh].map(docs);
  const all = [];
  for (let i = 0; parts.some((p) => i < p.length); i++) for (const p of parts) if (i < p.length) all.push(p[i]);
  const text = all.join('\0');
  fs.writeFileSync(out, text);
  console.log(`text: ${Buffer.byteLength(text)} bytes (English ${Buffer.byteLength(en)}, code ${Buffer.byteLength(code)}, Chinese ${Buffer.byteLength(zh)})`);
}

async function bench(tokPath, textPath, idsPath, rounds) {
  const { Tokenizer } = require('tokenizers');
  const docs = fs.readFileSync(textPath, 'utf8').split('\0');
  const t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tokPath);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  let best = Infinity, ids = null;
  for (let r = 0; r < rounds; r++) {
    const a = process.hrtime.bigint();
    const encs = [];
    for (const d of docs) encs.push(await tok.encode(d, null, { addSpecialTokens: false }));
    const s = Number(process.hrtime.bigint() - a) / 1e9;
    if (s < best) best = s;
    if (!ids) ids = [].concat(...encs.map((e) => e.getIds()));
  }
  fs.writeFileSync(idsPath, Buffer.from(new Int32Array(ids).buffer));
  console.log(`hf load_ms ${loadMs.toFixed(1)} best_s ${best.toFixed(6)} docs ${docs.length} ids ${ids.length}`);
}

function loadOnce(tokPath) {
  const { Tokenizer } = require('tokenizers');
  const t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tokPath);
  const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;
  if (!tok) process.exit(1);
  console.log(`load_ms ${loadMs.toFixed(2)}`);
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'make-text') makeText(...args);
else if (cmd === 'load-once') loadOnce(args[0]);
else if (cmd === 'bench') bench(args[0], args[1], args[2], Number(args[3] || 5)).catch((e) => { console.error(e); process.exit(1); });
else { console.error('usage: hf_bench.js make-text CORPUS SRC OUT | bench TOKENIZER TEXT IDS [ROUNDS] | load-once TOKENIZER'); process.exit(2); }
