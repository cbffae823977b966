#!/usr/bin/env python3
"""Convert SASRec.pytorch and gpt2rec_ddp.py checkpoints to safetensors files ctrain loads
directly, and back.

    convert_pytorch_checkpoint.py IN.pth OUT.safetensors
    convert_pytorch_checkpoint.py --to-pth IN.safetensors OUT.pth [--keep-optimizer]

The first form reads a checkpoint (torch.save of model.state_dict(); a dict holding one under
"state_dict", "model" or "model_state_dict", or a whole pickled module, also works), removes
DataParallel/DistributedDataParallel's "module." prefix where the names carry it, and writes
every tensor as little-endian float32 under its state_dict name. ctrain reads that file with
--state_dict_path (to evaluate it with --inference_only, or to start training from it). The
model is told by the names, and the tool says which it found:

  SASRec    pmixer/SASRec.pytorch (and TiSASRec.pytorch): item_emb.weight, pos_emb.weight,
            attention_layers.N.in_proj_weight, ..., forward_layers.N.conv1.weight with its Conv1d
            shape (d, d, 1), last_layernorm.*; for ctrain --model sasrec (tisasrec).
  gpt2rec   examples/pytorch/gpt2rec_ddp.py (user.weight and item.weight): its epoch checkpoints
            (epoch_E_step_S.pt, whose optimizer state, epoch and arguments are left out) and
            best_model.pt, for ctrain --model gpt2rec. The text mode follows from the names:
            ID-only (no proj.*: the program's --id_only), cached (proj.*: --use_cache; the text
            embeddings are not in the file, ctrain computes them from --lm_dir) or dynamic
            (proj.* and the fine-tuned GPT-2 under gpt2.*: ctrain --text_mode dynamic, whose
            --lm_dir gives the tokenizer and configuration and whose weights the file replaces).
            The program's arguments, when the file holds them, give the ctrain flags to use,
            which the tool prints. GPT-2 attention masks that older transformers versions kept
            in the state dict (gpt2.h.N.attn.bias, gpt2.h.N.attn.masked_bias) are buffers, not
            weights, and are left out.

The second form turns a ctrain checkpoint (or any safetensors file of float tensors) into a
.pth state dict that SASRec.pytorch's model.load_state_dict() accepts, and that gpt2rec_ddp.py
takes as --eval_only --checkpoint or --init_from; ctrain's Adam moments (optimizer.exp_avg.*,
optimizer.exp_avg_sq.*) are left out unless --keep-optimizer is given.

Needs PyTorch (any version with torch.frombuffer, 1.10 or newer) and nothing else: the
safetensors format is written and read here directly, so the `safetensors` package is not
required. Exit status: 0 on success, 1 with a one-line message on any error, 2 for bad usage.
"""

import argparse
import json
import os
import re
import struct
import sys

# safetensors dtype names of the torch dtypes this tool writes or reads.
_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}


def write_safetensors(path, tensors, metadata=None):
    """Write tensors (a dict name -> (dtype name, shape, raw little-endian bytes)) to path,
    atomically (temporary file + rename). Tensors are laid out in the dict's order; the header
    is padded with spaces to a multiple of 8 bytes, as the reference writer does."""
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, (_, _, data) in tensors.items():
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_safetensors(path):
    """Return (metadata dict, {name: (dtype name, shape, bytes)}) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise ValueError("%s: header length %d beyond the end of the file" % (path, n))
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        if not 0 <= b <= e <= len(blob) - base:
            raise ValueError("%s: tensor %s lies outside the file" % (path, name))
        out[name] = (t["dtype"], tuple(t["shape"]), blob[base + b:base + e])
    return meta, out


def _state_dict_of(obj, path):
    import torch
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model", "model_state_dict"):
            inner = obj.get(key)
            if isinstance(inner, dict) and all(torch.is_tensor(v) for v in inner.values()):
                return inner
        if all(torch.is_tensor(v) for v in obj.values()):
            return obj
    raise ValueError("%s: not a state dict (expected a dict of tensors)" % path)


_GPT2_MASK = re.compile(r"^gpt2\.h\.[0-9]+\.attn\.(bias|masked_bias)$")


def _strip_module(sd):
    """The state dict without DataParallel/DDP's "module." prefix (where every name has it)."""
    if sd and all(k.startswith("module.") for k in sd):
        return {k[len("module."):]: v for k, v in sd.items()}
    return sd


def _gpt2rec_mode(sd):
    """The gpt2rec_ddp.py text mode a state dict holds: "ID-only", "cached" or "dynamic"."""
    if any(k.startswith("gpt2.") for k in sd):
        return "dynamic"
    return "cached" if "proj.weight" in sd else "ID-only"


def _gpt2rec_flags(args, mode):
    """The ctrain flags of the gpt2rec_ddp.py arguments a checkpoint holds (a dict), or ""."""
    if not isinstance(args, dict):
        return ""
    flags = ["--model gpt2rec"]
    if args.get("embed_dim") is not None:
        flags.append("--embed_dim %s" % args["embed_dim"])
    if mode != "ID-only":
        flags.append("--text_mode %s" % mode)
        flags.append("--lm_dir %s" % (args.get("gpt2_path") or "?"))
        if args.get("item_text"):
            flags.append("--item_text %s" % args["item_text"])
        if args.get("max_text_len") is not None:
            flags.append("--max_text_len %s" % args["max_text_len"])
    if args.get("split"):
        flags.append("--split %s" % args["split"])
    out = " ".join(flags)
    if mode != "ID-only" and not args.get("gpt2_path"):
        out += (" (the program ran its own random GPT-2, which is no folder ctrain can read: "
                "--lm_dir needs a Hugging Face GPT-2 folder)")
    return out


def pth_to_safetensors(src, dst):
    import torch
    try:
        obj = torch.load(src, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - OSError, a truncated zip, a foreign pickle
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ValueError("%s: not a readable PyTorch checkpoint (%s: %s)"
                         % (src, type(e).__name__, first[:160])) from None
    args = obj.get("args") if isinstance(obj, dict) else None
    sd = _strip_module(_state_dict_of(obj, src))
    meta = {"format": "pt", "source": os.path.basename(src)}
    note = ""
    if "user.weight" in sd and "item.weight" in sd:
        sd = {k: v for k, v in sd.items() if not _GPT2_MASK.match(k)}
        mode = _gpt2rec_mode(sd)
        meta.update(model="gpt2rec", text_mode=mode)
        note = "gpt2rec, %s%s" % (mode, "; ctrain %s" % _gpt2rec_flags(args, mode)
                                  if isinstance(args, dict) else "")
    elif "item_emb.weight" in sd:
        note = "SASRec"
    tensors = {}
    for name, t in sd.items():
        if not t.is_floating_point():
            raise ValueError("%s: tensor %s is %s; only floating-point state dicts convert"
                             % (src, name, t.dtype))
        t = t.detach().to(torch.float32).contiguous()
        tensors[name] = ("F32", tuple(t.shape), t.numpy().tobytes())
    write_safetensors(dst, tensors, meta)
    return len(tensors), note


def safetensors_to_pth(src, dst, keep_optimizer=False):
    import torch
    _, tensors = read_safetensors(src)
    sd = {}
    for name, (dtype, shape, data) in tensors.items():
        if not keep_optimizer and name.startswith("optimizer."):
            continue
        if dtype not in _DTYPES:
            raise ValueError("%s: tensor %s has dtype %s" % (src, name, dtype))
        tdt = getattr(torch, _DTYPES[dtype])
        if len(data) == 0:
            sd[name] = torch.zeros(shape, dtype=tdt)
        else:
            sd[name] = torch.frombuffer(bytearray(data), dtype=tdt).reshape(shape).clone()
    tmp = dst + ".tmp.%d" % os.getpid()
    torch.save(sd, tmp)
    os.replace(tmp, dst)
    return len(sd), ""


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--to-pth", action="store_true",
                    help="convert a safetensors file to a .pth state dict")
    ap.add_argument("--keep-optimizer", action="store_true",
                    help="with --to-pth: keep ctrain's optimizer.* tensors")
    ap.add_argument("src")
    ap.add_argument("dst")
    args = ap.parse_args(argv)
    try:
        if args.to_pth:
            n, note = safetensors_to_pth(args.src, args.dst, args.keep_optimizer)
        else:
            n, note = pth_to_safetensors(args.src, args.dst)
    except ImportError as e:
        print("convert_pytorch_checkpoint: PyTorch is needed (%s)" % e, file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - one line for anything a damaged file raises
        print("convert_pytorch_checkpoint: %s" % e, file=sys.stderr)
        return 1
    print("%s: %d tensors -> %s%s" % (args.src, n, args.dst, " (%s)" % note if note else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
