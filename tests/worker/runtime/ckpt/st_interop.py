#!/usr/bin/env python3
"""st_interop.py read|write FILE - the Python side of the safetensors interoperability test.

Both sides generate the same contents: tensor "t_<DTYPE>" of shape (3, 5) whose element j
(row-major) is pattern(DTYPE, j) below, plus "scalar" (F64, shape ()), "empty" (F32, shape
(0, 4)) and "big" (F32, 300000 elements, j * 0.5). BF16 and F8 need PyTorch; without it they
are left out (and the C side accepts that).

read:  loads FILE (written by libctworker) with safetensors.numpy (and safetensors.torch for
       BF16/F8), checks every value, the metadata, that each "crc32.<name>" entry equals
       zlib.crc32 of the tensor's bytes, and that "ctrun_header_crc32" equals the header
       checksum computed by the rule of ctworker.h (header_crc below).
write: writes FILE with safetensors (torch.save_file when PyTorch is present, else numpy) and
       metadata {"format": "pt", "who": "python"}.
Prints one line per checked or written tensor set; exits non-zero on any mismatch.
"""
import sys
import zlib

import numpy as np

try:
    import torch
except Exception:
    torch = None

NUMPY = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
         "I32": np.int32, "U32": np.uint32, "I64": np.int64, "U64": np.uint64,
         "F16": np.float16, "F32": np.float32, "F64": np.float64}
TORCH_ONLY = ["BF16", "F8_E4M3", "F8_E5M2"]


def pattern(dtype, n):
    """Elements 0..n-1 as a numpy array (raw uint8 bit patterns for the F8 types)."""
    j = np.arange(n, dtype=np.uint64)
    if dtype == "BOOL":
        return (j % 3) == 0
    if dtype == "U8":
        return ((j * 7) % 256).astype(np.uint8)
    if dtype == "I8":
        return ((j * 5) % 256).astype(np.int64).astype(np.int64) - 128
    if dtype == "I16":
        return j.astype(np.int64) * 37 - 1000
    if dtype == "U16":
        return (j * 4099) % 65536
    if dtype == "I32":
        return j.astype(np.int64) * 100003 - 50000
    if dtype == "U32":
        return (j * 2654435761) % (1 << 32)
    if dtype == "I64":
        return j.astype(np.int64) * 1000000000000 - 7
    if dtype == "U64":
        return j * np.uint64(0x9E3779B97F4A7C15)  # wraps modulo 2^64
    if dtype in ("F16", "BF16"):
        return (j % 64).astype(np.float64) * 0.25 - 8
    if dtype == "F32":
        return j.astype(np.float64) * 0.5 - 3
    if dtype == "F64":
        return j.astype(np.float64) * 0.125 - 1e6
    if dtype in ("F8_E4M3", "F8_E5M2"):
        return ((j * 3) % 120).astype(np.uint8)
    raise ValueError(dtype)


def expected_numpy(dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    with np.errstate(over="ignore"):
        return pattern(dtype, n).astype(NUMPY[dtype]).reshape(shape)


def torch_dtype(dtype):
    return {"BF16": torch.bfloat16, "F8_E4M3": torch.float8_e4m3fn,
            "F8_E5M2": torch.float8_e5m2}[dtype]


def expected_torch(dtype, shape):
    n = int(np.prod(shape))
    if dtype == "BF16":
        return torch.tensor(pattern(dtype, n), dtype=torch.float64).to(torch.bfloat16).reshape(shape)
    raw = torch.tensor(pattern(dtype, n), dtype=torch.uint8)
    return raw.view(torch_dtype(dtype)).reshape(shape)


def header_crc(path):
    """The header checksum by its documented rule: zlib.crc32 of the header bytes (after the
    8-byte length, padding included) with the 8 characters of its own value read as zeros.
    Returns (stored value, computed value)."""
    import struct
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = f.read(n)
    key = b'"ctrun_header_crc32":"'
    at = header.index(key) + len(key)
    assert header.count(key) == 1, "the checksum's key appears more than once"
    blanked = header[:at] + b"00000000" + header[at + 8:]
    return header[at:at + 8].decode(), "%08x" % zlib.crc32(blanked)


def read(path):
    from safetensors import safe_open
    with safe_open(path, framework="numpy") as f:
        meta = f.metadata()
        names = list(f.keys())
    assert meta.get("ctrun_format") == "2", meta
    stored, computed = header_crc(path)
    assert meta.get("ctrun_header_crc32") == stored == computed, (stored, computed)
    assert meta.get("step") == "12" and meta.get("format") == "pt", meta
    arrays = {}
    numpy_names = [n for n in names if not any(n == "t_" + d for d in TORCH_ONLY)]
    with safe_open(path, framework="numpy") as f:
        for n in numpy_names:
            arrays[n] = f.get_tensor(n)
    for d in NUMPY:
        a = arrays["t_" + d]
        want = expected_numpy(d, (3, 5))
        assert a.dtype == want.dtype and a.shape == (3, 5), (d, a.dtype, a.shape)
        assert np.array_equal(a, want), (d, a, want)
    assert arrays["scalar"].shape == () and arrays["scalar"] == 2.5
    assert arrays["empty"].shape == (0, 4) and arrays["empty"].dtype == np.float32
    assert np.array_equal(arrays["big"], np.arange(300000, dtype=np.float32) * 0.5)
    for n, a in arrays.items():
        want = "%08x" % zlib.crc32(np.ascontiguousarray(a).tobytes())
        assert meta["crc32." + n] == want, (n, meta["crc32." + n], want)
    checked = len(arrays)
    if torch is not None:
        from safetensors.torch import load_file as load_torch
        tensors = load_torch(path)
        for d in TORCH_ONLY:
            t = tensors["t_" + d]
            want = expected_torch(d, (3, 5))
            assert t.dtype == want.dtype, (d, t.dtype)
            assert torch.equal(t.view(torch.uint8) if d != "BF16" else t,
                               want.view(torch.uint8) if d != "BF16" else want), d
            raw = t.contiguous().view(torch.uint8).numpy().tobytes()
            assert meta["crc32.t_" + d] == "%08x" % zlib.crc32(raw), d
            checked += 1
    print("read: %d tensors checked%s" % (checked, "" if torch else " (no torch: BF16/F8 skipped)"))


def write(path):
    meta = {"format": "pt", "who": "python"}
    if torch is not None:
        from safetensors.torch import save_file
        tensors = {"t_" + d: torch.from_numpy(np.ascontiguousarray(expected_numpy(d, (3, 5))))
                   for d in NUMPY}
        for d in TORCH_ONLY:
            tensors["t_" + d] = expected_torch(d, (3, 5))
        tensors["scalar"] = torch.tensor(2.5, dtype=torch.float64)
        tensors["empty"] = torch.zeros((0, 4), dtype=torch.float32)
        tensors["big"] = torch.arange(300000, dtype=torch.float32) * 0.5
        save_file(tensors, path, metadata=meta)
    else:
        from safetensors.numpy import save_file
        arrays = {"t_" + d: expected_numpy(d, (3, 5)) for d in NUMPY}
        arrays["scalar"] = np.array(2.5, dtype=np.float64)
        arrays["empty"] = np.zeros((0, 4), dtype=np.float32)
        arrays["big"] = np.arange(300000, dtype=np.float32) * 0.5
        save_file(arrays, path, metadata=meta)
    print("write: torch" if torch is not None else "write: numpy")


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](sys.argv[2])
