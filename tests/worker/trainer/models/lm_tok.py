"""lm_tok.py - the `tokenizers` side of test_lm_tok.c.

  lm_tok.py DIR [ITEMS]

Trains three byte-level BPE tokenizers with `tokenizers` on a small fixed corpus and saves them
as model folders under DIR:
  gpt2       GPT-2's pipeline: ByteLevel pre-tokenizer with its pattern, <|endoftext|>
  qwen2      Qwen2's: NFC, Split on Qwen2's pattern then ByteLevel without one, three specials
  flags      GPT-2's pattern with add_prefix_space, ignore_merges, and added tokens with
             lstrip / rstrip / single_word / normalized set
  gpt2_slow, qwen2_slow   the first two as vocab.json + merges.txt + tokenizer_config.json
  gpt2_bare, qwen2_bare   vocab.json + merges.txt alone (Qwen2: a config naming only the class);
             their ids come from transformers' GPT2Tokenizer / Qwen2Tokenizer on the folder
Then encodes every text (the built-in ones: English, contractions in both cases, digits,
whitespace runs of every kind, accents composed and decomposed, CJK, Arabic, emoji, special
tokens inside text; MovieLens-style titles and 2,000 more built from their parts; 3,000 random
strings over an alphabet of such characters; and, with ITEMS, the MovieLens titles of u.item,
read as latin-1) with encode(text, add_special_tokens=False),
and writes DIR/expected.json: the texts, each tokenizer's ids, and the pieces of the two
pre-tokenization patterns (Split with the pattern alone). Also DIR/classes.json: for every code
point, whether `tokenizers` counts it as \\s, \\p{L}, \\p{N} (its patterns' engine) or \\w (the
engine of single_word), as ranges.

Exit 77 when `tokenizers` cannot be imported.
"""
import json
import os
import random
import sys

try:
    from tokenizers import (Regex, Tokenizer, AddedToken, decoders, models, normalizers,
                            pre_tokenizers, trainers)
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
QWEN2_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
             r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

TEXTS = [
    "Hello world! It's a test, isn't it? We'll see; they've gone, I'm here, you'd know.",
    "IT'S LOUD. WE'LL SHOUT. THEY'VE YELLED. I'M HERE. YOU'D KNOW. 'S 'T 'RE 'Ll 'Ve",
    "The quick brown fox jumps over the lazy dog 1234567890 times, 3.14159 and 2,718.",
    "Toy Story (1995)", "GoldenEye (1995)", "Things to Do in Denver when You're Dead (1995)",
    "City of Lost Children, The (Cit\u00e9 des enfants perdus, La) (1995)",
    "Seven (Se7en) (1995)", "Usual Suspects, The (1995)",
    "   leading spaces", "trailing spaces   ", "tabs\tand\t\ttabs", "line\nbreak\n\nnew",
    "crlf\r\nline\r\n\r\n  indented\r\n", "mixed \t \n \r\n  end", " ", "", "\n", "  \n  ",
    "a  b   c    d", "no-break\u00a0space and\u3000ideographic\u2028line\u2029para\u0085nel",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9", "cafe\u0301 decomposed e\u0301", "\u00c5ngstr\u00f6m",
    "\u6771\u4eac\u90fd \u5927\u962a\u5e9c 2024\u5e74", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "emoji \U0001F600\U0001F680 and \U0001F468\u200d\U0001F469\u200d\U0001F467 family",
    "digits \u0661\u0662\u0663 and \u2167 roman and \u00bd half",
    "<|endoftext|>", "before<|endoftext|>after", "a <|im_start|>user\nhi<|im_end|> b",
    "<|endoftext|><|endoftext|> twice", "x<|im_start|>", "<|im_end|>",
    "special <tag> spaced  <tag>  and word<tag>word [MASK] [MASK]x x[MASK]",
    "what's up? don't! won't... shan't'", "''s '''t", "\u017f 's \u017ft '\u017f",
    "email@example.com http://x.y/z?a=1&b=2 #hash $100 50% (parens) [brackets] {braces}",
    "CamelCaseWords and snake_case_words and kebab-case-words",
    "\u0130stanbul \u1e9e \u00df STRASSE \u01c5",
    "\U0001D400\U0001D401 math letters \U0001D7CE\U0001D7CF math digits",
    "Garay \U00010D4A\U00010D4B digits \U00010D40\U00010D41 Kirat \U00016D43",
    "marks e\u0301[MASK] joiner \u200d[MASK] circled \u24b6[MASK] [MASK]\u0301 _[MASK] [MASK]_",
    "<tag>  !! stripped <tag>\t!!x <tag> !!",
]

# MovieLens-style titles: "Title, The (Year)", alternative titles in parentheses, accents,
# apostrophes, digits, punctuation; and genre lists. lm_tok.py builds more from their parts.
TITLES = [
    "Toy Story (1995)", "Jumanji (1995)", "Grumpier Old Men (1995)", "Heat (1995)",
    "Father of the Bride Part II (1995)", "American President, The (1995)",
    "Dracula: Dead and Loving It (1995)", "Ace Ventura: When Nature Calls (1995)",
    "Twelve Monkeys (a.k.a. 12 Monkeys) (1995)", "Cry, the Beloved Country (1995)",
    "Shanghai Triad (Yao a yao yao dao waipo qiao) (1995)", "Schindler's List (1993)",
    "Am\u00e9lie (Fabuleux destin d'Am\u00e9lie Poulain, Le) (2001)", "Richard III (1995)",
    "Crouching Tiger, Hidden Dragon (Wo hu cang long) (2000)", "Face/Off (1997)",
    "L\u00e9on: The Professional (a.k.a. The Professional) (L\u00e9on) (1994)",
    "8\u00bd (8 1/2) (1963)", "M*A*S*H (a.k.a. MASH) (1970)", "Wallace & Gromit: The Wrong "
    "Trousers (1993)", "Star Wars: Episode IV - A New Hope (1977)", "Das Boot (Boat, The) (1981)",
    "Dr. Strangelove or: How I Learned to Stop Worrying and Love the Bomb (1964)",
    "\u00a1Three Amigos! (1986)", "\u00c6on Flux (2005)", "K\u00f4kaku kid\u00f4tai (Ghost in "
    "the Shell) (1995)", "Mononoke-hime (Princess Mononoke) (1997)", "Ulysses' Gaze (To Vlemma "
    "tou Odyssea) (1995)", "It's a Wonderful Life (1946)", "Monty Python's Life of Brian (1979)",
    "Pok\u00e9mon: The First Movie (1998)", "Se\u00f1ora Acero (2014)", "Sen to Chihiro no "
    "kamikakushi (\u5343\u3068\u5343\u5c0b\u306e\u795e\u96a0\u3057) (2001)", "Nikita (La "
    "Femme Nikita) (1990)", "Three Colors: Red (Trois couleurs: Rouge) (1994)", "unknown",
    "Men in Black II (a.k.a. MIIB) (a.k.a. MIB 2) (2002)", "2001: A Space Odyssey (1968)",
    "Adventure|Animation|Children|Comedy|Fantasy", "Action|Crime|Thriller", "(no genres listed)",
    "Film-Noir|Mystery|Sci-Fi|IMAX",
]


def titles(rnd, count):
    """Titles built from the parts of TITLES: article moved to the end, years, alternatives."""
    words = [w for t in TITLES for w in t.replace("(", " ").replace(")", " ").split()]
    out = []
    for _ in range(count):
        name = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 6)))
        article = rnd.choice(["", ", The", ", A", ", Les", ", Der", ", L'"])
        alt = rnd.choice(["", " (a.k.a. %s)" % rnd.choice(words), " (%s)" % rnd.choice(words)])
        out.append("%s%s%s (%d)" % (name, article, alt, rnd.randint(1902, 2024)))
    return out

ALPHABET = list("abcXYZ019 '''\t\n\r.,!?-_<>|") + [
    "\u00a0", "\u3000", "\u2028", "\u0085", "\u00e9", "e\u0301", "\u017f", "\u0130", "\u00df",
    "\u6771", "\u4eac", "\u0661", "\u2167", "\U0001F600", "\u200d", "\u0301", "\u00bd",
    "'s", "'T", "'re", "'LL", "<|endoftext|>", "<|im_start|>", "[MASK]", "<tag>", "\r\n",
    "  ", "\U00010D4A", "\U00010D40"]


def corpus():
    words = []
    for t in TEXTS:
        words.append(t)
    rnd = random.Random(7)
    for _ in range(400):
        words.append("".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(1, 30))))
    return (words + TITLES) * 3


def bpe(vocab_size, specials):
    return trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, min_frequency=1,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                               show_progress=False)


def train_gpt2():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), bpe(700, ["<|endoftext|>"]))
    return tok


def train_qwen2():
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), bpe(700, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]))
    return tok


def train_flags():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), bpe(500, ["<|endoftext|>"]))
    tok.add_tokens([AddedToken("<tag>", lstrip=True, rstrip=True, normalized=False),
                    AddedToken("[MASK]", single_word=True, normalized=False),
                    AddedToken("word", single_word=True, normalized=True),
                    AddedToken(" !!", normalized=False)])
    return tok


def save_slow(tok, folder, cls):
    """vocab.json + merges.txt (the slow tokenizers' files) and tokenizer_config.json."""
    os.makedirs(folder, exist_ok=True)
    tok.model.save(folder)
    added = {}
    for t in json.loads(tok.to_str())["added_tokens"]:
        added[str(t["id"])] = {k: t[k] for k in ("content", "single_word", "lstrip", "rstrip",
                                                  "normalized", "special")}
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": cls, "added_tokens_decoder": added}, f)


def bare(toks, root, texts, exp):
    """vocab.json + merges.txt alone (GPT-2), and with a tokenizer_config.json that names only the
    class (Qwen2): transformers' own tokenizers for those folders give the ids (its defaults make
    <|endoftext|> special). Left out when transformers cannot be imported."""
    try:
        from transformers import GPT2Tokenizer, Qwen2Tokenizer
    except ImportError as e:
        print("  no transformers (%s): the bare folders are not checked" % e)
        return
    for name, tok, cls in (("gpt2_bare", toks["gpt2"], GPT2Tokenizer),
                           ("qwen2_bare", toks["qwen2"], Qwen2Tokenizer)):
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        tok.model.save(folder)
        if cls is Qwen2Tokenizer:
            with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
                json.dump({"tokenizer_class": "Qwen2Tokenizer"}, f)
        hf = cls.from_pretrained(folder)
        exp["ids"][name] = [hf(t, add_special_tokens=False)["input_ids"] for t in texts]


def classes():
    """For every code point, whether `tokenizers` counts it as \\s, \\p{L}, \\p{N} (the engine of
    its patterns: a Replace normalizer on the class marks each member) and \\w (the engine of
    single_word: "@@" after a code point matches only when that is not \\w), as ranges."""
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF and cp != 1]
    text = "".join(map(chr, cps))
    members = {}
    for name, pat in (("s", r"\s"), ("L", r"\p{L}"), ("N", r"\p{N}")):
        out = normalizers.Replace(Regex(pat), "\x01").normalize_str(text)
        assert len(out) == len(text)
        members[name] = [cp for cp, c in zip(cps, out) if c == "\x01"]
    tok = Tokenizer(models.WordLevel(vocab={"?": 0}, unk_token="?"))
    tok.add_tokens([AddedToken("@@", single_word=True, normalized=False)])
    aid = tok.token_to_id("@@")
    enc = tok.encode("".join("\x02" + chr(cp) + "@@\x02" for cp in cps), add_special_tokens=False)
    not_word = {cps[o[0] // 5] for i, o in zip(enc.ids, enc.offsets) if i == aid}
    members["W"] = [cp for cp in cps if cp not in not_word]
    out = {}
    for name, cpl in members.items():
        ranges = []
        for cp in cpl:
            if ranges and ranges[-1][1] == cp - 1:
                ranges[-1][1] = cp
            else:
                ranges.append([cp, cp])
        out[name] = ranges
    return out


def main():
    root = sys.argv[1]
    texts = list(TEXTS)
    rnd = random.Random(1234)
    for _ in range(3000):
        texts.append("".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 40))))
    texts += TITLES + titles(rnd, 2000)
    if len(sys.argv) > 2:
        with open(sys.argv[2], encoding="latin-1") as f:
            texts += [line.split("|")[1] for line in f if line.count("|") > 2]
    toks = {"gpt2": train_gpt2(), "qwen2": train_qwen2(), "flags": train_flags()}
    for name, tok in toks.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        tok.save(os.path.join(root, name, "tokenizer.json"))
    save_slow(toks["gpt2"], os.path.join(root, "gpt2_slow"), "GPT2Tokenizer")
    save_slow(toks["qwen2"], os.path.join(root, "qwen2_slow"), "Qwen2Tokenizer")
    exp = {"texts": texts, "ids": {}, "pieces": {}}
    for name, tok in toks.items():
        exp["ids"][name] = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    exp["ids"]["gpt2_slow"] = exp["ids"]["gpt2"]
    exp["ids"]["qwen2_slow"] = exp["ids"]["qwen2"]
    bare(toks, root, texts, exp)
    for name, pat in (("gpt2", GPT2_PAT), ("qwen2", QWEN2_PAT)):
        sp = pre_tokenizers.Split(Regex(pat), behavior="isolated")
        exp["pieces"][name] = [[p for p, _ in sp.pre_tokenize_str(t)] for t in texts]
    with open(os.path.join(root, "expected.json"), "w") as f:
        json.dump(exp, f)
    with open(os.path.join(root, "classes.json"), "w") as f:
        json.dump(classes(), f)
    print("  %d texts, %d tokenizers" % (len(texts), len(exp["ids"])))


if __name__ == "__main__":
    main()
