#!/usr/bin/env python3
"""Convert SASRec.pytorch checkpoints to safetensors files ctrain loads directly, and back.

    convert_pytorch_checkpoint.py IN.pth OUT.safetensors
    convert_pytorch_checkpoint.py --to-pth IN.safetensors OUT.pth [--keep-optimizer]

The first form reads a checkpoint saved by pmixer/SASRec.pytorch (torch.save of
model.state_dict(); a dict holding one under "state_dict" or "model", or a whole pickled
module, also works) and writes every tensor as little-endian float32 under its state_dict name:
item_emb.weight, pos_emb.weight, attention_layers.N.in_proj_weight, ...,
forward_layers.N.conv1.weight with its Conv1d shape (d, d, 1), last_layernorm.*. ctrain reads
that file with --state_dict_path (to evaluate it with --inference_only, or to start training
from it). TiSASRec.pytorch state dicts convert the same way.

The second form turns a ctrain checkpoint (or any safetensors file of float tensors) into a
.pth state dict that SASRec.pytorch's model.load_state_dict() accepts; ctrain's Adam moments
(optimizer.exp_avg.*, optimizer.exp_avg_sq.*) are left out unless --keep-optimizer is given.

Needs PyTorch (any version with torch.frombuffer, 1.10 or newer) and nothing else: the
safetensors format is written and read here directly, so the `safetensors` package is not
required. Exit status: 0 on success, 1 with a one-line message on any error, 2 for bad usage.
"""

import argparse
import json
import os
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


def pth_to_safetensors(src, dst):
    import torch
    sd = _state_dict_of(torch.load(src, map_location="cpu"), src)
    tensors = {}
    for name, t in sd.items():
        if not t.is_floating_point():
            raise ValueError("%s: tensor %s is %s; only floating-point state dicts convert"
                             % (src, name, t.dtype))
        t = t.detach().to(torch.float32).contiguous()
        tensors[name] = ("F32", tuple(t.shape), t.numpy().tobytes())
    write_safetensors(dst, tensors, {"format": "pt", "source": os.path.basename(src)})
    return len(tensors)


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
    return len(sd)


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
            n = safetensors_to_pth(args.src, args.dst, args.keep_optimizer)
        else:
            n = pth_to_safetensors(args.src, args.dst)
    except ImportError as e:
        print("convert_pytorch_checkpoint: PyTorch is needed (%s)" % e, file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - one line for anything a damaged file raises
        print("convert_pytorch_checkpoint: %s" % e, file=sys.stderr)
        return 1
    print("%s: %d tensors -> %s" % (args.src, n, args.dst))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
