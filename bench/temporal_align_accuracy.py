#!/usr/bin/env python3
"""temporal_align_accuracy.py - the stage-2 accuracy check of ctrain --model temporal: a curve
cache, a byte-level BPE tokenizer trained on its descriptions and a small Qwen2 that first
learns the descriptions' language and to read a prefix of input embeddings (the reference's
pretrain_lm, standing in for a real pretrained LM), then `ctrain --stage align` for a few
epochs; prints the summary's val_loss beside shuffled_val_loss.

    temporal_align_accuracy.py CTRAIN DIR [EPOCHS]
    temporal_align_accuracy.py CTRAIN DIR [EPOCHS] --word

Needs the PyTorch 2.x interpreter with transformers and tokenizers. With --word nothing is
prepared in Python: ctrain generates the same 1024 curves of seed 0 at start and builds the
reference's tiny random LM itself (no --lm_dir: the word-level tokenizer and a Qwen2 of the
same sizes, pretrained 300 steps by ctrain), which any Python 3 runs.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))

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


ENCODER = ["--patch_len", "8", "--hidden_units", "32", "--num_blocks", "2", "--num_heads", "2",
           "--ff_dim", "64", "--num_soft_tokens", str(K), "--batch_size", "32", "--lr", "2e-3",
           "--warmup_steps", "20", "--resume", "never"]


def report(cmd, run):
    print(" ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout[-3000:])
    sys.stderr.write(p.stderr[-2000:])
    with open(os.path.join(run, "summary.json")) as f:
        s = json.load(f)
    print("val_loss %.4f shuffled_val_loss %.4f" % (s["val_loss"], s["shuffled_val_loss"]))


def word(ctrain, d, epochs):
    """ctrain's own tiny random LM (no --lm_dir) on the curves it generates."""
    run = os.path.join(d, "run_word")
    report([ctrain, "--model", "temporal", "--stage", "align", "--num_samples", str(N),
            "--seq_len", str(S), "--data_seed", "0", "--train_dir", run, "--num_epochs", epochs,
            "--lm_hidden_size", "64", "--lm_num_layers", "2", "--lm_num_heads", "4",
            "--lm_num_kv_heads", "2", "--lm_intermediate_size", "128", "--lm_seed", "1234",
            "--lm_pretrain_steps", "300"] + ENCODER, run)


def main():
    args = [a for a in sys.argv[1:] if a != "--word"]
    ctrain, d = args[:2]
    epochs = args[2] if len(args) > 2 else "10"
    if "--word" in sys.argv[1:]:
        return word(ctrain, d, epochs)
    import torch
    import transformers
    from tokenizers import (Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            trainers)
    import temporal_curves
    import temporal_encoder_ddp as ref
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
    report([ctrain, "--model", "temporal", "--stage", "align", "--dataset", cache, "--lm_dir",
            lm_dir, "--train_dir", run, "--num_epochs", epochs] + ENCODER, run)


if __name__ == "__main__":
    main()
