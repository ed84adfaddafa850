#!/usr/bin/env python3
"""The tokenizer parity corpus: generated strings (fixed seed) plus hand_written.json.

    python3 tests/parity/corpus/generate_corpus.py [--dump]   # prints counts, or every string

Categories: ASCII prose, code, numbers, runs of whitespace, CJK, emoji, combining marks,
invalid-looking sequences, special-token text, and random mixtures of all of them. Every string
is valid Unicode without surrogates (the `tokenizers` library takes nothing else).
"""
import json
import pathlib
import random
import sys

SEED = 20260602
HERE = pathlib.Path(__file__).resolve().parent

WORDS = (
    "the of and to in is was that for it with as his on be at by had are but from or have an they "
    "which one you were all we her she there would their will when who him been has more if no out "
    "so up said what its about than into them can only other time new some could these two may "
    "first then do any like my now over such our man me even most made after also did many off "
    "before must well back through years where much your way down should because each just those "
    "people how too little state good very make world still own see men work long get here between "
    "both life being under never day same another know while last might us great old year tokenizer "
    "inference engine kernel attention transformer Hugging Face GPU throughput latency"
).split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ll", "'D"]
PUNCT = list(".,;:!?-()[]{}\"'/…—–«»¿¡")

CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }",
    "const add = (a, b) => a + b;\nconsole.log(add(1, 2));",
    '{"key": "value", "list": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}',
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "if [ -f ~/.bashrc ]; then source ~/.bashrc; fi && echo $PATH | tr ':' '\\n'",
    "<html>\n  <body class=\"main\">\n    <p>Hello &amp; welcome</p>\n  </body>\n</html>",
    "fn main() {\n    let v: Vec<u8> = (0..10).collect();\n    println!(\"{:?}\", v);\n}",
    "    x = [i**2 for i in range(10) if i % 2 == 0]  # squares\n",
    "a->b = *c++ << 3 | ~d & 0xFF ^ e >>= 2;",
    "git commit -m \"fix: off-by-one in BlockPool::allocate\" && git push origin main",
    "public static void main(String[] args) { System.out.println(\"Hi\"); }",
    "x := map[string]int{\"a\": 1}\nfor k, v := range x {\n\tfmt.Println(k, v)\n}",
    "@decorator\nclass Foo(Base):\n    __slots__ = ('a', 'b')\n\n    def __init__(self):\n        super().__init__()\n",
    "$ ls -la /usr/local/bin | grep -E '^-rwx' | wc -l",
    "matrix[i][j] += alpha * A[i][k] * B[k][j];  // C = alpha*A*B",
    "\t\t\treturn nullptr;\r\n\t\t}\r\n",
]

CJK = [
    "你好，世界！", "我们今天去公园散步吧。", "机器学习模型的推理速度很重要", "東京は日本の首都です。",
    "ひらがなとカタカナ、そして漢字。", "今日はいい天気ですね", "안녕하세요, 세계!", "한국어 토크나이저 테스트",
    "中文English混合text测试", "「引用」と『二重引用』", "全角：ＡＢＣ１２３！？", "龍龘靐齉爩",
    "𠀀𠀁𪚥𰻞", "繁體中文與简体中文", "ｶﾀｶﾅ半角", "第1章　はじめに",
]
EMOJI = [
    "😀", "😂🤣", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷🇯🇵🇺🇸", "1️⃣2️⃣3️⃣", "❤️", "🧑🏿‍💻", "🤖 robots",
    "✨🔥💯", "🫠🫶🏻", "☕️ coffee", "👩‍🔬 science", "⌚⌛", "🐍+🦀=❤", "🏴󠁧󠁢󠁳󠁣󠁴󠁿",
]
COMBINING = [
    "e\u0301", "cafe\u0301", "n\u0303", "a\u0300\u0301\u0302\u0303", "Z\u0351\u036b\u0343\u036a\u0302\u036b",
    "Tiếng Việt có dấu", "Tie\u0302\u0301ng Vie\u0323\u0302t", "हिन्दी भाषा", "क्षत्रिय", "العربية مَرْحَبًا",
    "עִבְרִית", "ภาษาไทย", "ἀρχὴ", "\u0301leading combining", "a\u20dd", "o\u0308\u0304", "\u1100\u1161\u11a8",
    "한\u0300", "Å vs A\u030a vs \u212b", "ﬁ ﬂ ligatures", "\u0345\u0314",
]
INVALID_LOOKING = [
    "\ufffd", "\ufffd\ufffd abc", "\\x80\\xff", "<0xE2><0x82><0xAC>", "<0x41>", "<0xZZ>", "Ã©tÃ© mojibake",
    "\ufeffBOM at start", "zero\u200bwidth", "\u200d\u200c joiners", "\ue000\uf8ff private use",
    "\U0010ffff\U000f0000", "\ufffe\uffff nonchars", "\x00null\x00", "\x1b[31mred\x1b[0m", "\x7f\x85\x9f",
    "\\ud800 written out", "%E2%82%AC url-escaped", "&#x20AC; &euro;", "\u202eright-to-left override",
    "\u2028line sep\u2029para sep", "tab\x0bvtab\x0cff", "\r\r\n\n\r", "\u00a0\u00a0nbsp",
]
SPECIALS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>", "<file_sep>", "<jupyter_code>",
    "<s>", "</s>", "<unk>", "<tool>", "</tool>", "<|eot_id|>",
]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2009", "\u180e", "\u200b", " \t ", "\x0c"]
DIGITS = "0123456789"
UNICODE_NUMBERS = ["٣٤٥", "१२३", "１２３", "²³", "½", "Ⅻ", "〇", "𝟎𝟏𝟐", "⑦", "๓"]


def prose(r):
    n = r.randint(3, 40)
    out = []
    for i in range(n):
        w = r.choice(WORDS)
        if r.random() < 0.15:
            w = w.capitalize()
        if r.random() < 0.05:
            w = w.upper()
        if r.random() < 0.08:
            w += r.choice(CONTRACTIONS)
        out.append(w)
        if r.random() < 0.12:
            out[-1] += r.choice(PUNCT)
    text = " ".join(out)
    return text[0].upper() + text[1:] + r.choice([".", "!", "?", "", "...", "\n"])


def number(r):
    kind = r.randint(0, 9)
    if kind == 0:
        return str(r.randint(0, 10 ** r.randint(1, 20)))
    if kind == 1:
        return f"{r.uniform(-1e6, 1e6):.{r.randint(0, 8)}f}"
    if kind == 2:
        return f"{r.randint(1, 10**9):,}"
    if kind == 3:
        return f"+1 ({r.randint(100, 999)}) {r.randint(100, 999)}-{r.randint(1000, 9999)}"
    if kind == 4:
        return f"{r.randint(1900, 2100)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}Z"
    if kind == 5:
        return hex(r.getrandbits(r.randint(4, 64)))
    if kind == 6:
        return f"{r.uniform(0, 10):.3e}"
    if kind == 7:
        return "".join(r.choice(DIGITS) for _ in range(r.randint(1, 60)))
    if kind == 8:
        return " ".join(r.choice(UNICODE_NUMBERS) for _ in range(r.randint(1, 4)))
    return f"v{r.randint(0, 9)}.{r.randint(0, 99)}.{r.randint(0, 999)} costs ${r.randint(1, 999)}.{r.randint(0, 99):02d} ({r.randint(1, 100)}%)"


def whitespace_run(r):
    parts = []
    for _ in range(r.randint(1, 8)):
        if r.random() < 0.5:
            parts.append("".join(r.choice(WHITESPACE) for _ in range(r.randint(1, 12))))
        else:
            parts.append(r.choice(WORDS))
    return "".join(parts)


def code(r):
    snippet = r.choice(CODE)
    indent = r.choice(["", "    ", "\t", "  ", "        "])
    return "\n".join(indent + line for line in snippet.split("\n"))


def special_text(r):
    pieces = []
    for _ in range(r.randint(1, 6)):
        c = r.random()
        if c < 0.4:
            pieces.append(r.choice(SPECIALS))
        elif c < 0.55:
            s = r.choice(SPECIALS)  # a near-miss: cut short, doubled bracket, or spaced
            pieces.append(r.choice([s[:-1], s[1:], s + ">", "<" + s, s.replace("|", " |"), s.upper()]))
        elif c < 0.75:
            pieces.append(r.choice(WORDS))
        else:
            pieces.append(r.choice(WHITESPACE))
    return "".join(pieces)


def mixture(r):
    pools = [WORDS, CJK, EMOJI, COMBINING, INVALID_LOOKING, SPECIALS, WHITESPACE, UNICODE_NUMBERS, PUNCT]
    return "".join(r.choice(r.choice(pools)) + r.choice(["", " ", ""]) for _ in range(r.randint(1, 12)))


def random_codepoints(r):
    # Characters from across the planes (no surrogates), in short words.
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x3040, 0x30FF),
              (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xF8FF), (0xFE00, 0xFE0F), (0xFF00, 0xFFEF),
              (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0xE0000, 0xE007F)]
    out = []
    for _ in range(r.randint(1, 30)):
        lo, hi = r.choice(ranges)
        out.append(chr(r.randint(lo, hi)))
        if r.random() < 0.2:
            out.append(" ")
    return "".join(out)


def generate():
    r = random.Random(SEED)
    corpus = []
    plan = [(prose, 90), (code, 45), (number, 60), (whitespace_run, 50), (lambda r: r.choice(CJK) + r.choice(["", " ", "\n"]) + r.choice(CJK), 30),
            (lambda r: "".join(r.choice(EMOJI) + r.choice(["", " "]) for _ in range(r.randint(1, 5))), 30),
            (lambda r: " ".join(r.choice(COMBINING) for _ in range(r.randint(1, 4))), 30),
            (lambda r: r.choice(INVALID_LOOKING) + r.choice(["", " ", "x"]) + r.choice(INVALID_LOOKING), 30),
            (special_text, 60), (mixture, 50), (random_codepoints, 40)]
    for make, count in plan:
        for _ in range(count):
            corpus.append(make(r))
    # Every fixed list entry on its own, too.
    for pool in (CODE, CJK, EMOJI, COMBINING, INVALID_LOOKING, SPECIALS, WHITESPACE, UNICODE_NUMBERS):
        corpus.extend(pool)
    return corpus


def hand_written():
    return json.loads((HERE / "hand_written.json").read_text(encoding="utf-8"))


def full_corpus():
    """Generated strings, then the hand-written ones; duplicates removed, order kept."""
    seen = set()
    out = []
    for s in generate() + hand_written():
        if s not in seen:
            seen.add(s)
            out.append(s)
    for s in out:
        assert not any(0xD800 <= ord(c) <= 0xDFFF for c in s), repr(s)
    return out


if __name__ == "__main__":
    strings = full_corpus()
    if "--dump" in sys.argv:
        for s in strings:
            print(json.dumps(s, ensure_ascii=False))
    print(f"{len(strings)} strings ({len(generate())} generated, {len(hand_written())} hand-written)", file=sys.stderr)
