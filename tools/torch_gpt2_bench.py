"""PyTorch eager twin of bench/cuda_step.cpp: GPT-2 124M forward + backward, bf16 autocast
(fp32 master weights, as ringstep), same B and T, no torch.compile; attention through
F.scaled_dot_product_attention (what eager code uses). With `adamw`, each step also clips
the gradients' global norm and runs torch.optim.AdamW (its default implementation), the
step ringstep's trainer times (configs/gpt2-124m.yaml). Prints per-phase medians and one
RESULT line with tokens/s and MFU (6N + 6LCT FLOPs per token, N without wpe).
    python3 tools/torch_gpt2_bench.py [B] [steps] [adamw]
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, T, C, L, NH = 50257, 1024, 768, 12, 12


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcp = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, Tt, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, Tt, NH, C // NH).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, Tt, C))
        return x + self.fcp(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))


def main():
    B = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    with_adamw = len(sys.argv) > 3 and sys.argv[3] == "adamw"
    torch.manual_seed(0)
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    idx = torch.randint(0, V, (B, T), device="cuda")
    tg = torch.randint(0, V, (B, T), device="cuda")
    fwd, bwd, upd = [], [], []
    for s in range(steps + 2):
        model.zero_grad(set_to_none=False)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx, tg)
        loss.item()
        t1 = time.perf_counter()
        loss.backward()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if with_adamw:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            torch.cuda.synchronize()
        t3 = time.perf_counter()
        if s >= 2:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            upd.append((t3 - t2) * 1e3)
    med = lambda v: sorted(v)[len(v) // 2]
    f, b, u = med(fwd), med(bwd), med(upd)
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel()
    tok_s = B * T / ((f + b + u) / 1e3)
    tflops = (6 * n + 6 * L * C * T) * tok_s / 1e12
    name = torch.cuda.get_device_name()
    peak = 989.0 if ("H100" in name or "H200" in name) else 0.0
    print(f"gpu: {name}; torch {torch.__version__}; loss {loss.item():.4f}")
    print(f"phase     ms (median of {steps})\nforward   {f:.2f}\nbackward  {b:.2f}\n"
          f"optimizer {u:.2f}\nstep      {f + b + u:.2f}")
    mfu = 100 * tflops / peak if peak else 0.0
    what = "torch-eager bf16 + AdamW" if with_adamw else "torch-eager bf16"
    print(f"RESULT {what} B={B} T={T}: {f + b + u:.1f} ms/step, {tok_s:.0f} tok/s, "
          f"{tflops:.1f} TFLOP/s, MFU {mfu:.1f}% of {peak:.0f}")


if __name__ == "__main__":
    main()
