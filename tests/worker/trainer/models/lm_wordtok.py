"""lm_wordtok.py - the reference side of test_lm_wordtok.c.

  lm_wordtok.py OUT.json

Builds examples/pytorch/temporal_encoder_ddp.py's WordTokenizer as its main() does (the
training descriptions of a generated set and the prompt), for two data seeds, and encodes
every description of the set (validation included), the prompt and some texts with words it
has not seen, Unicode letters, digits, marks, punctuation runs and white space of every kind.
Writes the texts it was built from, the texts encoded, their ids and the vocabulary size.

Exit 77 when tokenizers (or the reference's imports) cannot be imported.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "examples", "pytorch"))
try:
    import tokenizers  # noqa: F401
    import temporal_curves
    from temporal_encoder_ddp import WordTokenizer
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

EXTRA = [
    "na\u00efve caf\u00e9 \u2014 \u00fcber_cool 3.14, x\u00b2!! \u00bfqu\u00e9? "
    "\u65e5\u672c\u8a9e\u30c6\u30ad\u30b9\u30c8",
    "tabs\tand\nnewlines\r\n  and\u00a0no-break\u2003em\u3000ideographic spaces",
    "e\u0301 combining a\u0308 marks, \u0661\u0662\u0663 Arabic digits, \u2167 roman",
    "<eos> <pad> <unk> ... --> (a)[b]{c} \"quoted\" 'single' it's 50% $5 #1 @x",
    "emoji \U0001F600\U0001F680 and ZWJ \u200d joined\u200cword _under_ score__",
    "", "   ", "a", "Describe the curve:",
]

out = {"sets": []}
for seed, n, val in ((0, 600, 0.1), (7, 300, 0.25)):
    texts = [temporal_curves.describe(temporal_curves.sample_params(seed, i)) for i in range(n)]
    n_val = max(1, int(n * val))
    build = texts[: n - n_val] + ["Describe the curve:"]
    if seed == 7:
        build += EXTRA[:3]
    tok = WordTokenizer(build)
    enc = texts + EXTRA
    out["sets"].append({"build": build, "encode": enc, "ids": tok.encode(enc),
                        "vocab_size": tok.vocab_size})
with open(sys.argv[1], "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False)
print("  WordTokenizer: %s" % ", ".join(
    "%d texts encoded, vocabulary %d" % (len(s["encode"]), s["vocab_size"]) for s in out["sets"]))
