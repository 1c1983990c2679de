#!/usr/bin/env node
// golden-tokenizer.mjs writes the Hugging Face reference data that the tests
// of classifier/tokenize compare the Go tokenizers against.
//
// It uses two npm packages, installed outside the repository:
//
//   mkdir -p /tmp/hftok && cd /tmp/hftok && npm init -y >/dev/null &&
//     npm install tokenizers@0.23.2 @huggingface/tokenizers@0.2.0
//
//   tokenizers              Hugging Face's own Node binding of the Rust
//                           tokenizers crate (the prebuilt native library ships
//                           inside the npm package). This is the reference: it
//                           is the code that Python's `tokenizers` runs.
//   @huggingface/tokenizers the pure JavaScript port (tokenizers.js). It is
//                           run as a cross-check only: it does not reproduce
//                           the Rust library exactly (see the notes it gets
//                           in the output), so rows where it differs carry its
//                           ids in "js_ids" for the record.
//
// Set HFTOK_DIR when the packages are installed elsewhere than /tmp/hftok.
//
// Golden ids (ids without special tokens; truncation and padding disabled):
//
//   node scripts/golden-tokenizer.mjs golden --tokenizer TOKENIZER_JSON \
//       --out OUT.jsonl INPUT.jsonl[:N] ...
//
// Each INPUT is JSONL with a "text" field (or "text_b64": raw bytes, base64,
// for texts that are not valid UTF-8; they are decoded the way Node decodes
// UTF-8, replacing invalid bytes with U+FFFD, which is also what Python's
// bytes.decode(errors="replace") does). INPUT:N takes N rows spread evenly
// over the file (row i*len/N for i in 0..N-1), a deterministic sample. Texts
// are cut to --max-chars code points (default 300). Each output row is
// {"text" or "text_b64", "ids"[, "js_ids"]}.
//
// Code point table (how the Rust normalizer and pre-tokenizer treat every
// code point on its own):
//
//   node scripts/golden-tokenizer.mjs codepoints --tokenizer TOKENIZER_JSON \
//       --out OUT.txt
//
// Lines of OUT.txt (hex code points; P is the pre-tokenizer class of the raw
// code point: w word character, p punctuation (its own pre-token), s
// whitespace (a separator)):
//
//   R LO HI KIND P   every code point in LO..HI normalizes the same way:
//                    KIND id (unchanged), del (removed), sp (to " "),
//                    cjk (to " c ")
//   M CP P OUT...    CP normalizes to the code points OUT (none: removed)
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const hftokDir = process.env.HFTOK_DIR || '/tmp/hftok';
const requireFrom = createRequire(path.join(hftokDir, 'package.json'));

function usage(msg) {
  if (msg) console.error(`golden-tokenizer: ${msg}`);
  console.error('usage: golden-tokenizer.mjs golden --tokenizer FILE --out FILE INPUT.jsonl[:N]...');
  console.error('       golden-tokenizer.mjs codepoints --tokenizer FILE --out FILE');
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { inputs: [], maxChars: 300 };
  opts.mode = argv[0];
  for (let i = 1; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--tokenizer') opts.tokenizer = argv[++i];
    else if (a === '--out') opts.out = argv[++i];
    else if (a === '--max-chars') opts.maxChars = Number(argv[++i]);
    else if (a.startsWith('--')) usage(`unknown flag ${a}`);
    else opts.inputs.push(a);
  }
  if (opts.mode !== 'golden' && opts.mode !== 'codepoints') usage('mode must be golden or codepoints');
  if (!opts.tokenizer || !opts.out) usage('--tokenizer and --out are required');
  return opts;
}

function loadRust(file) {
  const { Tokenizer } = requireFrom('tokenizers');
  const tok = Tokenizer.fromFile(file);
  tok.disableTruncation();
  tok.disablePadding();
  return tok;
}

function loadJS(file) {
  const { Tokenizer } = requireFrom('@huggingface/tokenizers');
  const json = JSON.parse(fs.readFileSync(file, 'utf8'));
  json.truncation = null;
  json.padding = null;
  return new Tokenizer(json, {});
}

function readRows(spec, maxChars) {
  let file = spec;
  let n = 0;
  const m = /^(.*):(\d+)$/.exec(spec);
  if (m) {
    file = m[1];
    n = Number(m[2]);
  }
  const lines = fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim() !== '');
  let picked = lines;
  if (n > 0 && n < lines.length) {
    picked = [];
    for (let i = 0; i < n; i++) picked.push(lines[Math.floor((i * lines.length) / n)]);
  }
  return picked.map((l) => {
    const o = JSON.parse(l);
    if (o.text_b64 !== undefined) return { text_b64: o.text_b64 };
    if (typeof o.text !== 'string') throw new Error(`${file}: row without "text": ${l.slice(0, 80)}`);
    const cps = Array.from(o.text);
    return { text: cps.length > maxChars ? cps.slice(0, maxChars).join('') : o.text };
  });
}

async function golden(opts) {
  const rust = loadRust(opts.tokenizer);
  const js = loadJS(opts.tokenizer);
  const out = [];
  const seen = new Set();
  let jsDiffs = 0;
  for (const spec of opts.inputs) {
    for (const row of readRows(spec, opts.maxChars)) {
      const key = row.text_b64 !== undefined ? `b64:${row.text_b64}` : `t:${row.text}`;
      if (seen.has(key)) continue;
      seen.add(key);
      const text = row.text_b64 !== undefined ? Buffer.from(row.text_b64, 'base64').toString('utf8') : row.text;
      const enc = await rust.encode(text, null, { addSpecialTokens: false });
      const ids = Array.from(enc.getIds());
      const o = { ...row, ids };
      const jsIds = js.encode(text, { add_special_tokens: false }).ids.map(Number);
      if (JSON.stringify(jsIds) !== JSON.stringify(ids)) {
        o.js_ids = jsIds;
        jsDiffs++;
        console.error(`tokenizers.js differs: ${JSON.stringify(text).slice(0, 120)}`);
      }
      out.push(JSON.stringify(o));
    }
  }
  fs.writeFileSync(opts.out, out.join('\n') + '\n');
  console.error(`wrote ${out.length} rows to ${opts.out} (${jsDiffs} where tokenizers.js differs)`);
}

function codepoints(opts) {
  const rust = loadRust(opts.tokenizer);
  const norm = rust.getNormalizer();
  const pre = rust.getPreTokenizer();
  const hex = (c) => c.toString(16).toUpperCase();
  const lines = [];
  let run = null; // {lo, hi, kind, p}
  const flush = () => {
    if (run) lines.push(`R ${hex(run.lo)} ${hex(run.hi)} ${run.kind} ${run.p}`);
    run = null;
  };
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue; // not chars: Rust strings cannot hold them
    const c = String.fromCodePoint(cp);
    const pieces = pre.preTokenizeString('a' + c + 'a').length;
    const p = pieces === 3 ? 'p' : pieces === 2 ? 's' : pieces === 1 ? 'w' : null;
    if (p === null) throw new Error(`U+${hex(cp)}: ${pieces} pre-tokens`);
    const n = norm.normalizeString(c);
    let kind = null;
    if (n === c) kind = 'id';
    else if (n === '') kind = 'del';
    else if (n === ' ') kind = 'sp';
    else if (n === ' ' + c + ' ') kind = 'cjk';
    if (kind !== null) {
      if (run && run.kind === kind && run.p === p && run.hi === cp - 1) run.hi = cp;
      else {
        flush();
        run = { lo: cp, hi: cp, kind, p };
      }
      continue;
    }
    flush();
    lines.push(`M ${hex(cp)} ${p}${Array.from(n).map((x) => ' ' + hex(x.codePointAt(0))).join('')}`);
  }
  flush();
  fs.writeFileSync(opts.out, lines.join('\n') + '\n');
  console.error(`wrote ${lines.length} lines to ${opts.out}`);
}

const opts = parseArgs(process.argv.slice(2));
if (opts.mode === 'golden') await golden(opts);
else codepoints(opts);
