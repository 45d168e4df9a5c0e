#!/usr/bin/env python3
"""Loads a ringstep export (safetensors, Hugging Face GPT-2 names) into a GPT-2 written in
plain PyTorch (no other packages) and prints its mean loss on a token file:

  tools/load_in_pytorch.py MODEL.safetensors TOKENS.bin [--batches 4] [--batch-size 2]
                           [--seq-len T] [--json]

The windows are the token file's first batches x batch-size windows of seq_len + 1 tokens,
in file order (inputs = a window's first seq_len tokens, targets = its last seq_len): the
same windows `ringstep`'s tests evaluate. Token files are described in docs/formats.md.
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32}


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        buf = bytearray(data[begin:end])
        tensors[name] = torch.frombuffer(buf, dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
    return tensors, meta


def read_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:8] != b"RSTOKENS":
        sys.exit(f"{path}: not a ringstep token file")
    count = struct.unpack("<Q", raw[16:24])[0]
    return torch.frombuffer(bytearray(raw[32:32 + 2 * count]), dtype=torch.int16).to(torch.int64) & 0xFFFF


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def gelu(x):  # GPT-2's tanh approximation
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_logits(p, n_layer, n_head, idx):
    B, T = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    C = x.shape[-1]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(n_layer):
        h = f"h.{l}."
        a = layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"])
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]  # Conv1D: [in, out]
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // n_head)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = layer_norm(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
        m = gelu(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"])
    return x @ p["wte.weight"].T  # the LM head is tied to the token embedding


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=0, help="default: the model's n_positions")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    params, meta = read_safetensors(a.model)
    T = a.seq_len or int(meta["n_positions"])
    tokens = read_tokens(a.tokens)
    n = a.batches * a.batch_size
    if tokens.numel() < n * (T + 1):
        sys.exit(f"{a.tokens}: {tokens.numel()} tokens, need {n * (T + 1)}")
    windows = tokens[: n * (T + 1)].view(n, T + 1)
    losses = []
    with torch.no_grad():
        for b in range(a.batches):
            w = windows[b * a.batch_size:(b + 1) * a.batch_size]
            logits = gpt2_logits({k: v.double() for k, v in params.items()}, int(meta["n_layer"]),
                                 int(meta["n_head"]), w[:, :T])
            losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)))
    loss = float(torch.stack(losses).mean())
    if a.json:
        print(json.dumps({"loss": loss, "windows": n, "seq_len": T}))
    else:
        print(f"loss {loss:.6f} nats/token over {n} windows of {T} tokens (PyTorch {torch.__version__})")


if __name__ == "__main__":
    main()
