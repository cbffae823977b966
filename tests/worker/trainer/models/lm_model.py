"""lm_model.py - the transformers side of test_lm_model.c.

  make DIR   tiny randomly initialised GPT-2 and Qwen2 models saved by save_pretrained under
             DIR/<name>, and for each DIR/<name>.ref.safetensors with what transformers computes
             in float32 on the token ids of ids() below (labels = the ids, so the loss is the mean
             next-token cross-entropy over the L - 1 predicted positions of each row):
               "logits" (B*L, V), "loss" (1), "grad.<parameter name>" for every parameter, and
               "dembeds" (B*L, C): the gradient of the loss with respect to inputs_embeds when
               the same rows are given as the token table's rows with every weight frozen.

Exit 77 when torch or transformers cannot be imported.
"""
import os
import sys

try:
    import torch
    import transformers
    from safetensors.torch import save_file
except ImportError as e:  # the C test turns 77 into a skip
    print("skip: %s" % e)
    sys.exit(77)

B, L = 3, 9


def ids(vocab):
    # the same formula as test_lm_model.c
    return torch.tensor([[(b * 31 + t * 7 + 3 + (t * t) % 5) % vocab for t in range(L)]
                         for b in range(B)], dtype=torch.long)


MODELS = {
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=53, n_positions=16, n_embd=24, n_layer=2, n_head=4, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    "gpt2_layer_scale": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=41, n_positions=12, n_embd=16, n_layer=3, n_head=2, n_inner=40,
        activation_function="gelu", scale_attn_by_inverse_layer_idx=True, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        rope_theta=10000.0, tie_word_embeddings=False)),
    "qwen2_tied": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=48, hidden_size=24, intermediate_size=36, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=24,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)),
}


def make(root):
    torch.manual_seed(0)
    for name, build in MODELS.items():
        model = build().float().eval()
        with torch.no_grad():  # every tensor random, biases and norms included
            for pname, p in model.named_parameters():
                if "norm" in pname or "ln_" in pname:
                    p.normal_(1.0, 0.2) if pname.endswith("weight") else p.normal_(0.0, 0.2)
                else:
                    p.normal_(0.0, 0.3)
        model.save_pretrained(os.path.join(root, name))
        x = ids(model.config.vocab_size)
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        ref = {"logits": out.logits.detach().reshape(B * L, -1).contiguous(),
               "loss": out.loss.detach().reshape(1).contiguous()}
        for pname, p in model.named_parameters():
            ref["grad." + pname] = p.grad.detach().clone().contiguous()
        # every weight frozen, the token rows given as inputs_embeds
        model.zero_grad(set_to_none=True)
        for p in model.parameters():
            p.requires_grad_(False)
        emb = model.get_input_embeddings().weight[x].detach().clone().requires_grad_(True)
        out2 = model(inputs_embeds=emb, labels=x)
        out2.loss.backward()
        assert torch.allclose(out2.loss, out.loss, rtol=1e-6, atol=0), name
        ref["dembeds"] = emb.grad.detach().reshape(B * L, -1).contiguous()
        save_file(ref, os.path.join(root, name + ".ref.safetensors"))
        print("  %-18s %s, loss %.6f" % (name, type(model).__name__, out.loss.item()))


if __name__ == "__main__":
    {"make": make}[sys.argv[1]](sys.argv[2])
