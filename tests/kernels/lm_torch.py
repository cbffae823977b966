"""lm_torch.py - the PyTorch / transformers side of test_lm_torch.c.

  lm_torch.py OUT.json

Computes, with transformers' own modules and functions where they exist, the ops of
kernels/cpu/lm.c on fixed random inputs and writes inputs and outputs (float32 values as JSON
lists) to OUT.json: Qwen2RMSNorm, NewGELUActivation (GPT-2's gelu_new) and the erf GELU, SiLU
times up (Qwen2MLP), Qwen2RotaryEmbedding with apply_rotary_pos_emb at positions up to 40,000,
causal attention with repeat_kv (4 query heads on 2 key/value heads), and cross-entropy with
ignore_index -100 over a vocabulary including token 0. Exit 77 without torch or transformers.
"""
import json
import sys

try:
    import torch
    import torch.nn.functional as F
    from transformers import Qwen2Config
    from transformers.activations import NewGELUActivation
    from transformers.models.qwen2 import modeling_qwen2 as q2
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)


def flat(t):
    return t.detach().to(torch.float32).reshape(-1).tolist()


def main():
    torch.manual_seed(5)
    out = {}
    # RMSNorm
    x = torch.randn(6, 64) * 2
    norm = q2.Qwen2RMSNorm(64, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(64) + 0.5)
    out["rms"] = {"x": flat(x), "w": flat(norm.weight), "y": flat(norm(x))}
    # GELU
    g = torch.linspace(-8, 8, 1001)
    out["gelu"] = {"x": flat(g), "tanh": flat(NewGELUActivation()(g)), "erf": flat(F.gelu(g))}
    # SwiGLU's gate
    gate, up = torch.randn(500) * 4, torch.randn(500)
    out["swiglu"] = {"gate": flat(gate), "up": flat(up), "y": flat(F.silu(gate) * up)}
    # RoPE
    cfg = Qwen2Config(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                      rope_theta=1000000.0, max_position_embeddings=65536)
    rot = q2.Qwen2RotaryEmbedding(config=cfg)
    pos = torch.tensor([[0, 1, 5, 1000, 32767, 40000]])
    qr = torch.randn(1, 4, 6, 64)
    cos, sin = rot(qr, pos)
    qo, _ = q2.apply_rotary_pos_emb(qr, qr, cos, sin)
    out["rope"] = {"pos": pos.reshape(-1).tolist(), "theta": 1000000.0, "q": flat(qr.transpose(1, 2)),
                   "y": flat(qo.transpose(1, 2)), "cos": flat(cos[..., :32]),
                   "sin": flat(sin[..., :32])}
    # grouped-query causal attention: (B=1, L=9), 4 query heads on 2 key/value heads, width 8
    L, NH, KVH, HD = 9, 4, 2, 8
    q = torch.randn(1, NH, L, HD)
    k = torch.randn(1, KVH, L, HD)
    v = torch.randn(1, KVH, L, HD)
    kr, vr = q2.repeat_kv(k, NH // KVH), q2.repeat_kv(v, NH // KVH)
    s = q @ kr.transpose(2, 3) / HD ** 0.5
    s = s.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1), float("-inf"))
    o = torch.softmax(s, dim=-1) @ vr  # (1, NH, L, HD)
    packed = torch.cat([q.transpose(1, 2).reshape(L, NH * HD), k.transpose(1, 2).reshape(L, KVH * HD),
                        v.transpose(1, 2).reshape(L, KVH * HD)], dim=1)
    out["gqa"] = {"L": L, "NH": NH, "KVH": KVH, "HD": HD, "qkv": flat(packed),
                  "y": flat(o.transpose(1, 2))}
    # cross-entropy through a head, ignore_index -100, token 0 a target
    N, C, V = 12, 16, 50
    feats, wte = torch.randn(N, C), torch.randn(V, C) * 0.5
    tgt = torch.randint(0, V, (N,))
    tgt[0], tgt[3], tgt[7] = 0, -100, -100
    loss = F.cross_entropy(feats @ wte.T, tgt, ignore_index=-100)
    out["ce"] = {"N": N, "C": C, "V": V, "feats": flat(feats), "wte": flat(wte),
                 "tgt": tgt.tolist(), "loss": float(loss)}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
