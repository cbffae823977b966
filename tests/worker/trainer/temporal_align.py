"""temporal_align.py - ctrain --model temporal --stage align against the PyTorch program
examples/pytorch/temporal_encoder_ddp.py (its TemporalModel with the Projector, lm_loss over a
frozen Qwen2, AdamW, clipping and warm-up + cosine schedule), run by test_temporal_train.c with
the PyTorch 2.x interpreter:

    temporal_align.py CTRAIN CTRUN DIR

  1. a curve cache written by the reference's temporal_curves.write_cache, a byte-level BPE
     tokenizer trained on its descriptions and a tiny random Qwen2 saved with it (--lm_dir);
  2. the reference's initial weights (encoder and projector) exported to safetensors and given
     to ctrain as --state_dict_path;
  3. 20 optimizer steps of stage 2 in both, dropout 0, float32, one step per epoch (the batch is
     the whole training set): every step's loss equal within 1e-4, and the final evaluation's
     val_loss and shuffled_val_loss equal to PyTorch's lm_loss on the validation curves (each
     description after its own curve, and after the next validation curve's); the same on 2
     ranks under ctrun with 2 accumulated micro-batches per rank (the reference averages the
     micro-batches' token means: ct_shard's permutation says which curves share one);
  3b. --inference_only of the final weights: the same val_loss and shuffled_val_loss;
      --grad_checkpointing: the same losses bit for bit;
  3c. the same 20 steps through a tiny GPT-2 (ctrain's other LM architecture);
  4. a stage-1 checkpoint (no projector) as --state_dict_path: the encoder loads, training runs;
  5. a run under ctrun killed at step 12 (--inject) and restarted from its checkpoint: the
     resumed run ends with the uninterrupted run's final weights, bit for bit.

Exits 77 when torch, numpy, safetensors, yaml, transformers or tokenizers is missing.
"""
import json
import os
import shutil
import sys

try:
    import numpy as np
    import torch
    import transformers
    from safetensors.numpy import load_file
    from safetensors.torch import save_file
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import trainers
    import yaml  # noqa: F401 (the reference imports it)
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
import temporal_curves  # noqa: E402
import temporal_encoder_ddp as ref  # noqa: E402
import ddp_common as dc  # noqa: E402
from temporal_train import MODEL, N, S, VAL, STEPS, LR, WD, WARMUP, CLIP, SEED  # noqa: E402
from temporal_train import run, train_losses, ctrain_args, philox_block, M32  # noqa: E402

QWEN2_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
             r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
PROMPT = "Describe the curve:"
MAX_TEXT = 40
LM_HIDDEN = 32


def make_lm(d, texts):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts + [PROMPT], trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    eos = tok.token_to_id("<|endoftext|>")
    torch.manual_seed(5)
    lm = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=tok.get_vocab_size(), hidden_size=LM_HIDDEN, intermediate_size=48,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, rope_theta=10000.0, tie_word_embeddings=True,
        eos_token_id=eos, bos_token_id=eos, pad_token_id=eos))
    lm.save_pretrained(d)
    tok.save(os.path.join(d, "tokenizer.json"))
    for p in lm.parameters():
        p.requires_grad_(False)
    lm.eval()
    return tok, eos, lm


def permutation(seed, epoch, n):
    """ct_shard_permutation: Fisher-Yates from the top over stream (1 << 48) | epoch, positions
    drawn by Lemire's method from consecutive 32-bit Philox words."""
    stream, k = (1 << 48) | epoch, [0]

    def u32():
        w = philox_block(seed, stream, k[0] // 4)[k[0] % 4]
        k[0] += 1
        return w

    def below(m):
        x = u32() * m
        if (x & M32) < m:
            threshold = ((1 << 32) - m) % m
            while (x & M32) < threshold:
                x = u32() * m
        return x >> 32

    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = below(i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def batch(tok, eos, texts):
    """The reference's Collate: ids cut to MAX_TEXT - 1, eos appended, right-padded."""
    ids = [tok.encode(t, add_special_tokens=False).ids[:MAX_TEXT - 1] + [eos] for t in texts]
    n = max(len(x) for x in ids)
    text = torch.full((len(ids), n), eos, dtype=torch.long)
    mask = torch.zeros((len(ids), n), dtype=torch.bool)
    for j, x in enumerate(ids):
        text[j, :len(x)] = torch.tensor(x)
        mask[j, :len(x)] = True
    return text, mask


def align_args(ctrain, cache, init, run_dir, lm_dir, epochs=STEPS):
    return ctrain_args(ctrain, cache, init, run_dir, epochs=epochs) + [
        "--stage", "align", "--lm_dir", lm_dir, "--num_soft_tokens",
        str(MODEL["num_soft_tokens"]), "--max_text_tokens", str(MAX_TEXT), "--prompt", PROMPT]


def main():
    ctrain, ctrun, d = sys.argv[1:4]
    cache = os.path.join(d, "cache")
    temporal_curves.write_cache(cache, 3, N, S, log=None)
    curves, texts, _ = temporal_curves.read_cache(cache)
    n_val = max(1, int(N * VAL))
    n_train = N - n_val
    lm_dir = os.path.join(d, "lm")
    tok, eos, lm = make_lm(lm_dir, texts[:n_train])
    prompt_ids = torch.tensor(tok.encode(PROMPT, add_special_tokens=False).ids)

    torch.manual_seed(0)
    model = ref.TemporalModel(MODEL, S, LM_HIDDEN)
    ref.set_stage(model, "align")
    init = os.path.join(d, "init.safetensors")
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, init)

    # ---- PyTorch: 20 steps of the reference's stage 2 (one batch: the training set)
    x = torch.from_numpy(np.array(curves[:n_train]))
    text, tmask = batch(tok, eos, texts[:n_train])
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WD)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, dc.warmup_cosine(WARMUP, STEPS))
    model.train()
    want = []
    for step in range(STEPS):
        loss = ref.lm_loss(lm, model(x), prompt_ids, text, tmask)[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        sched.step()
        want.append(loss.item())
    model.eval()
    xv = torch.from_numpy(np.array(curves[n_train:]))
    shifted = [texts[n_train + (i + 1) % n_val] for i in range(n_val)]
    with torch.no_grad():
        _, s_real, _, c_real = ref.lm_loss(lm, model(xv), prompt_ids,
                                           *batch(tok, eos, texts[n_train:]))
        _, s_shuf, _, c_shuf = ref.lm_loss(lm, model(xv), prompt_ids, *batch(tok, eos, shifted))
    v_want, sh_want = float(s_real / c_real), float(s_shuf / c_shuf)

    # ---- ctrain, 1 rank
    r1 = os.path.join(d, "run1")
    p = run(align_args(ctrain, cache, init, r1, lm_dir))
    got = train_losses(r1)
    worst = max(abs(a - b) for a, b in zip(got, want)) if got else float("inf")
    print("stage 2, 1 rank: %d steps, max |loss ctrain - loss torch| = %.3g" % (len(got), worst))
    for s, (a, b) in enumerate(zip(got, want)):
        print("  step %2d  ctrain %.7f  torch %.7f" % (s + 1, a, b))
    if len(got) != STEPS or not worst < 1e-4:
        sys.stdout.write(p.stdout)
        raise SystemExit("FAIL: losses differ")
    with open(os.path.join(r1, "summary.json")) as f:
        summ = json.load(f)
    print("val_loss ctrain %.7f torch %.7f; shuffled_val_loss ctrain %.7f torch %.7f" % (
        summ["val_loss"], v_want, summ["shuffled_val_loss"], sh_want))
    if not (abs(summ["val_loss"] - v_want) < 1e-4 and
            abs(summ["shuffled_val_loss"] - sh_want) < 1e-4):
        raise SystemExit("FAIL: the evaluation differs from PyTorch's")
    final = load_file(os.path.join(r1, "final.safetensors"))
    for name, prm in model.state_dict().items():
        if name.startswith("recon.") or name == "mask_token":
            continue  # no gradient in stage 2
        got_w, want_w = final[name], prm.detach().numpy()
        if name.endswith("in_proj_bias"):  # the key bias: see temporal_train.py
            c = got_w.shape[0] // 3
            got_w = np.concatenate([got_w[:c], got_w[2 * c:]])
            want_w = np.concatenate([want_w[:c], want_w[2 * c:]])
        diff = float(np.abs(got_w - want_w).max())
        if not diff < 1e-4:
            raise SystemExit("FAIL: %s differs from PyTorch's by %.3g after %d steps" % (
                name, diff, STEPS))
    if any(k.startswith("model.") or k.startswith("lm_head") for k in final):
        raise SystemExit("FAIL: the frozen LM's tensors are in the checkpoint")
    print("stage 2, 1 rank: final weights within 1e-4 of PyTorch's; no LM tensor saved")
    p = run([ctrain] + align_args(ctrain, cache, os.path.join(r1, "final.safetensors"),
                                  os.path.join(d, "infer"), lm_dir)[1:] + ["--inference_only"])
    inf = json.loads(p.stdout.split("# summary: ")[1].splitlines()[0])
    if inf["val_loss"] != summ["val_loss"] or \
            inf["shuffled_val_loss"] != summ["shuffled_val_loss"]:
        raise SystemExit("FAIL: --inference_only gives %r, training's last evaluation %r" % (
            inf, summ))
    print("--inference_only of final.safetensors: the same val_loss and shuffled_val_loss")

    # ---- --grad_checkpointing (the LM's blocks recomputed in the backward): the same losses
    rg = os.path.join(d, "run_gc")
    run(align_args(ctrain, cache, init, rg, lm_dir) + ["--grad_checkpointing"])
    got_gc = train_losses(rg)
    if got_gc != got:
        raise SystemExit("FAIL: --grad_checkpointing changes the losses: %r vs %r" % (
            got_gc, got))
    print("--grad_checkpointing: the same losses, bit for bit")

    # ---- 2 ranks under ctrun (CPU ring), 2 accumulated micro-batches of 4 curves per rank: the
    # reference's loss is the mean of its 4 micro-batches' token means, so which curves share a
    # micro-batch matters: rank r, micro-batch a takes positions [8r + 4a, 8r + 4a + 4) of the
    # step's epoch permutation (ct_shard's order, reproduced here)
    model2 = ref.TemporalModel(MODEL, S, LM_HIDDEN)
    model2.load_state_dict({k: torch.from_numpy(v) for k, v in load_file(init).items()})
    ref.set_stage(model2, "align")
    opt = torch.optim.AdamW(model2.parameters(), lr=LR, weight_decay=WD)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, dc.warmup_cosine(WARMUP, STEPS))
    model2.train()
    want2 = []
    for step in range(STEPS):
        perm = permutation(SEED, step, n_train)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for q in range(4):
            idx = perm[4 * q: 4 * q + 4]
            t_, m_ = batch(tok, eos, [texts[i] for i in idx])
            loss = ref.lm_loss(lm, model2(x[idx]), prompt_ids, t_, m_)[0]
            (loss / 4).backward()
            total += loss.item() / 4
        torch.nn.utils.clip_grad_norm_(model2.parameters(), CLIP)
        opt.step()
        sched.step()
        want2.append(total)
    r2 = os.path.join(d, "run2")
    run([ctrun, "--standalone", "--nproc_per_node", "2", "--max_restarts", "0"] +
        align_args(ctrain, cache, init, r2, lm_dir) + ["--batch_size", "8", "--grad_accum", "2"])
    got2 = train_losses(r2)
    worst2 = max(abs(a - b) for a, b in zip(got2, want2)) if got2 else float("inf")
    print("stage 2, 2 ranks x 2 accumulated micro-batches: max |loss ctrain - loss torch| = %.3g"
          % worst2)
    if len(got2) != STEPS or not worst2 < 1e-4:
        for s, (a, b) in enumerate(zip(got2, want2)):
            print("  step %2d  ctrain %.7f  torch %.7f" % (s + 1, a, b))
        raise SystemExit("FAIL: 2-rank losses differ")

    # ---- a GPT-2 LM (its position table added to the rows' embeddings): 20 steps, 1 rank
    g_dir = os.path.join(d, "gpt2")
    torch.manual_seed(6)
    g_lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=LM_HIDDEN, n_layer=2, n_head=4,
        bos_token_id=eos, eos_token_id=eos, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    g_lm.save_pretrained(g_dir)
    tok.save(os.path.join(g_dir, "tokenizer.json"))
    for prm in g_lm.parameters():
        prm.requires_grad_(False)
    g_lm.eval()
    model3 = ref.TemporalModel(MODEL, S, LM_HIDDEN)
    model3.load_state_dict({k: torch.from_numpy(v) for k, v in load_file(init).items()})
    ref.set_stage(model3, "align")
    opt = torch.optim.AdamW(model3.parameters(), lr=LR, weight_decay=WD)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, dc.warmup_cosine(WARMUP, STEPS))
    model3.train()
    want3 = []
    for step in range(STEPS):
        loss = ref.lm_loss(g_lm, model3(x), prompt_ids, text, tmask)[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model3.parameters(), CLIP)
        opt.step()
        sched.step()
        want3.append(loss.item())
    r5 = os.path.join(d, "run_gpt2")
    run(align_args(ctrain, cache, init, r5, g_dir))
    got3 = train_losses(r5)
    worst3 = max(abs(a - b) for a, b in zip(got3, want3)) if got3 else float("inf")
    print("stage 2 through GPT-2, 1 rank: max |loss ctrain - loss torch| = %.3g" % worst3)
    if len(got3) != STEPS or not worst3 < 1e-4:
        raise SystemExit("FAIL: GPT-2 losses differ")

    # ---- a stage-1 file (no projector) initialises the encoder
    s1 = os.path.join(d, "stage1.safetensors")
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
               if not k.startswith("projector.")}, s1)
    r4 = os.path.join(d, "run4")  # lr 1e-30: every step moves the weights by less than an ulp
    run(align_args(ctrain, cache, s1, r4, lm_dir, epochs=1) + ["--lr", "1e-30"])
    w4, w1 = load_file(os.path.join(r4, "final.safetensors")), load_file(s1)
    for name in w1:
        if not np.array_equal(w4[name], w1[name]):
            raise SystemExit("FAIL: %s of the stage-1 file did not load" % name)
    if not any(k.startswith("projector.") for k in w4):
        raise SystemExit("FAIL: no projector in the stage-2 checkpoint")
    print("a stage-1 file as --state_dict_path: the encoder loads, the projector is initialised")

    # ---- bad input: one line naming what is wrong, no crash
    bare = os.path.join(d, "bare")
    shutil.copytree(cache, bare)
    os.unlink(os.path.join(bare, "descriptions.jsonl"))
    p = run(align_args(ctrain, bare, init, os.path.join(d, "bad1"), lm_dir), check=False)
    if p.returncode == 0 or "descriptions.jsonl" not in p.stderr:
        raise SystemExit("FAIL: a cache without descriptions: exit %d, %r" % (
            p.returncode, p.stderr))
    p = run(align_args(ctrain, cache, init, os.path.join(d, "bad2"), lm_dir) +
            ["--max_text_tokens", "100"], check=False)
    if p.returncode == 0 or "over the 64 positions" not in p.stderr:
        raise SystemExit("FAIL: rows longer than the LM's positions: exit %d, %r" % (
            p.returncode, p.stderr))
    print("a cache without descriptions, rows over the LM's positions: one-line errors")

    # ---- a kill and a resume under ctrun: the same final weights as the uninterrupted run
    r3 = os.path.join(d, "run3")
    p = run([ctrun, "--standalone", "--nproc_per_node", "1", "--max_restarts", "1",
             "--inject", "kill:rank=0:at=step=12"] + align_args(ctrain, cache, init, r3, lm_dir),
            check=False)
    if p.returncode != 0 or "injected kill at step 12" not in p.stdout + p.stderr or \
            "# resumed from" not in p.stdout:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        raise SystemExit("FAIL: the run was not killed and resumed")
    a = load_file(os.path.join(r1, "final.safetensors"))
    b = load_file(os.path.join(r3, "final.safetensors"))
    for name in a:
        if not np.array_equal(a[name], b[name]):
            raise SystemExit("FAIL: %s differs after the kill and resume" % name)
    print("kill at step 12 and resume under ctrun: final weights bit-identical")
    print("PASS")


if __name__ == "__main__":
    main()
