"""lm_hf.py - the transformers side of test_lm_hf.c.

  make DIR   tiny GPT-2 and Qwen2 models (random weights, float32 / float16 / bfloat16, a
             sharded one) saved by save_pretrained under DIR/<name>, and the values transformers
             holds for each as float32 in DIR/<name>.ref.safetensors
  check DIR  loads every DIR/<name>.saved folder (written by ctrain) with from_pretrained and
             checks that nothing is missing or unexpected and that every tensor equals the
             reference exactly

Exit 77 when torch or transformers cannot be imported.
"""
import os
import sys

try:
    import torch
    import transformers
    from safetensors.torch import save_file, load_file
except ImportError as e:  # the C test turns 77 into a skip
    print("skip: %s" % e)
    sys.exit(77)

MODELS = {
    "gpt2": ("GPT2LMHeadModel", torch.float32, None),
    "gpt2_bare": ("GPT2Model", torch.float32, None),
    "qwen2_tied_f16_sharded": ("Qwen2ForCausalLM", torch.float16, "3KB"),
    "qwen2_bf16": ("Qwen2ForCausalLM", torch.bfloat16, None),
    "qwen2_bare": ("Qwen2Model", torch.float32, None),
}


def config(name):
    if name.startswith("gpt2"):
        return transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2,
                                       n_head=4, bos_token_id=0, eos_token_id=0)
    return transformers.Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=24,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, max_position_embeddings=32,
                                    tie_word_embeddings="tied" in name)


def make(root):
    torch.manual_seed(0)
    for name, (cls, dtype, shard) in MODELS.items():
        model = getattr(transformers, cls)(config(name))
        with torch.no_grad():
            for p in model.parameters():  # every tensor random, biases and norms included
                p.normal_(0.0, 0.5)
        model = model.to(dtype)
        kw = {"max_shard_size": shard} if shard else {}
        model.save_pretrained(os.path.join(root, name), **kw)
        index = os.path.join(root, name, "model.safetensors.index.json")
        assert os.path.exists(index) == bool(shard), name
        ref = {k: v.detach().float().clone().contiguous() for k, v in model.state_dict().items()}
        save_file(ref, os.path.join(root, name + ".ref.safetensors"))


def check(root):
    for name, (cls, _, _) in MODELS.items():
        model, info = getattr(transformers, cls).from_pretrained(
            os.path.join(root, name + ".saved"), dtype=torch.float32, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v and k != "mismatched_keys" or
               (k == "mismatched_keys" and v)}
        if bad:
            sys.exit("%s: from_pretrained reports %s" % (name, bad))
        ref = load_file(os.path.join(root, name + ".ref.safetensors"))
        got = model.state_dict()
        for k, v in ref.items():
            if not torch.equal(got[k], v):
                sys.exit("%s: %s differs after the round trip" % (name, k))
        print("  %-24s from_pretrained(saved folder): %d tensors equal" % (name, len(ref)))


if __name__ == "__main__":
    {"make": make, "check": check}[sys.argv[1]](sys.argv[2])
