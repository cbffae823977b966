#!/usr/bin/env python3
"""temporal_align_accuracy.py - the stage-2 accuracy check of ctrain --model temporal: a curve
cache, a byte-level BPE tokenizer trained on its descriptions and a small Qwen2 that first
learns the descriptions' language and to read a prefix of input embeddings (the reference's
pretrain_lm, standing in for a real pretrained LM), then `ctrain --stage align` for a few
epochs; prints the summary's val_loss beside shuffled_val_loss.

    temporal_align_accuracy.py CTRAIN DIR [EPOCHS]

Needs the PyTorch 2.x interpreter with transformers and tokenizers.
"""
import json
import os
import subprocess
import sys

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))
import temporal_curves  # noqa: E402
import temporal_encoder_ddp as ref  # noqa: E402

PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
       r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
PROMPT, K, N, S = "Describe the curve:", 4, 1024, 64


class Tok:
    """The tokenizer as pretrain_lm reads it."""

    def __init__(self, t):
        self.t, self.eos_id = t, t.token_to_id("<|endoftext|>")
        self.pad_id, self.vocab_size = self.eos_id, t.get_vocab_size()

    def encode(self, texts):
        return [e.ids for e in self.t.encode_batch(list(texts), add_special_tokens=False)]


def main():
    ctrain, d = sys.argv[1:3]
    epochs = sys.argv[3] if len(sys.argv) > 3 else "10"
    cache, lm_dir = os.path.join(d, "cache"), os.path.join(d, "lm")
    temporal_curves.write_cache(cache, 0, N, S, log=None)
    _, texts, _ = temporal_curves.read_cache(cache)
    n_train = N - max(1, int(N * 0.1))
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(texts[:n_train] + [PROMPT], trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<|endoftext|>"], min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tok = Tok(t)
    torch.manual_seed(1234)
    lm = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=tok.vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        tie_word_embeddings=True, eos_token_id=tok.eos_id, bos_token_id=tok.eos_id,
        pad_token_id=tok.pad_id))
    ref.pretrain_lm(lm, tok, texts[:n_train], PROMPT, K, 300, 1234, "cpu", print)
    lm.save_pretrained(lm_dir)
    t.save(os.path.join(lm_dir, "tokenizer.json"))
    run = os.path.join(d, "run")
    cmd = [ctrain, "--model", "temporal", "--stage", "align", "--dataset", cache, "--lm_dir",
           lm_dir, "--train_dir", run, "--patch_len", "8", "--hidden_units", "32",
           "--num_blocks", "2", "--num_heads", "2", "--ff_dim", "64", "--num_soft_tokens", str(K),
           "--batch_size", "32", "--num_epochs", epochs, "--lr", "2e-3", "--warmup_steps", "20",
           "--resume", "never"]
    print(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout[-3000:])
    sys.stderr.write(p.stderr[-2000:])
    with open(os.path.join(run, "summary.json")) as f:
        s = json.load(f)
    print("val_loss %.4f shuffled_val_loss %.4f" % (s["val_loss"], s["shuffled_val_loss"]))


if __name__ == "__main__":
    main()
