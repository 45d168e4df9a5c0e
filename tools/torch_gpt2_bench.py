"""PyTorch twin of ringstep's GPT-2 124M step (bench/cuda_step.cpp, configs/gpt2-124m.yaml):
same model (V 50257 in 50304 rows, T 1024, C 768, 12 layers, 12 heads, tied embeddings), same B and T,
bf16 autocast over fp32 master weights, attention through F.scaled_dot_product_attention.
With `adamw`, each step also clips the gradients' global norm to 1.0 and runs
torch.optim.AdamW (fused on CUDA unless --adamw-impl says otherwise): the step ringstep's
trainer times. Prints per-phase medians over the steady-state steps (the warm-up steps,
compilation included, are left out and timed apart) and two result lines:
  RESULT <what> B=.. T=..: X ms/step, Y tok/s, Z TFLOP/s, MFU W% of P[, ...]
  RESULT_JSON {...}      the same numbers and torch.cuda.max_memory_allocated/_reserved
FLOPs per token: 6N + 6LCT, N without wpe and the padded rows (ringstep's count). The
embedding has ringstep's gpt2 config's 50304 rows (50257 padded to a multiple of 128, as
nanoGPT pads); the tokens stay below 50257. tools/gpu_check.sh runs it.

    python3 tools/torch_gpt2_bench.py [B] [steps] [adamw] [--compile none|full|regional]
        [--warmup N] [--device cuda|cpu] [--tiny] [--adamw-impl fused|foreach|default]

--compile full: torch.compile(model), the whole forward and loss in one graph. regional:
each Block compiled (one graph, reused by all 12) and the final LayerNorm + logits + loss
compiled apart: the same kernels for the blocks, a fraction of the compile time. --tiny and
--device cpu: a small model on the CPU, for tools/gpu_check.sh --rehearse. Exit code 3 (and
`RESULT skipped: ...`) when torch or the device is not there.
"""
import argparse
import json
import sys
import time

T0 = time.perf_counter()


def log(msg):
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


def skip(why):
    print(f"RESULT skipped: {why}", flush=True)
    sys.exit(3)


try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # the rehearsal machine may have no torch
    skip(f"torch not importable: {e}")

FULL = dict(V=50257, rows=50304, T=1024, C=768, L=12, NH=12)
TINY = dict(V=256, rows=256, T=64, C=64, L=2, NH=2)


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.C, self.NH = C, NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcp = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, Tt, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, Tt, self.NH, C // self.NH).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, Tt, C))
        return x + self.fcp(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def head_loss(x, ln_w, ln_b, wte, targets):
    """Final LayerNorm, logits through the tied embedding, cross-entropy in fp32."""
    x = F.layer_norm(x, (x.shape[-1],), ln_w, ln_b)
    logits = x @ wte.t()
    return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


class GPT(nn.Module):
    def __init__(self, V, T, C, L, NH):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)
        self.head = head_loss

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(x, self.lnf.weight, self.lnf.bias, self.wte.weight, targets)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("batch", nargs="?", type=int, default=16)
    ap.add_argument("steps", nargs="?", type=int, default=10, help="timed steady-state steps")
    ap.add_argument("adamw", nargs="?", choices=["adamw"], help="clip + AdamW in each step")
    ap.add_argument("--compile", choices=["none", "full", "regional"], default="none")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed steps first (default 2 eager, 3 compiled)")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a small model (rehearsal)")
    ap.add_argument("--adamw-impl", choices=["fused", "foreach", "default"], default="fused")
    a = ap.parse_args()
    dims = TINY if a.tiny else FULL
    V, rows, T, C, L, NH = (dims[k] for k in ("V", "rows", "T", "C", "L", "NH"))
    B, dev = a.batch, a.device
    warmup = a.warmup if a.warmup is not None else (2 if a.compile == "none" else 3)
    if dev == "cuda" and not torch.cuda.is_available():
        skip("torch.cuda is not available")
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    log(f"torch {torch.__version__}; device {dev}; B={B} T={T} compile={a.compile}")

    torch.manual_seed(0)
    model = GPT(rows, T, C, L, NH).to(dev)
    with_adamw = a.adamw == "adamw"
    kw = {}
    if a.adamw_impl == "fused" and dev == "cuda":
        kw["fused"] = True
    elif a.adamw_impl == "foreach":
        kw["foreach"] = True
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **kw)
    adamw_name = "fused" if kw.get("fused") else ("foreach" if kw.get("foreach") else "default")
    if a.compile == "full":
        step_model = torch.compile(model)
    elif a.compile == "regional":
        for b in model.blocks:
            b.compile()
        model.head = torch.compile(head_loss)
        step_model = model
    else:
        step_model = model
    idx = torch.randint(0, V, (B, T), device=dev)
    tg = torch.randint(0, V, (B, T), device=dev)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    fwd, bwd, upd = [], [], []
    t_warm = time.perf_counter()
    warmup_s = None
    for s in range(a.steps + warmup):
        model.zero_grad(set_to_none=False)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev, dtype=torch.bfloat16):
            loss = step_model(idx, tg)
        loss.item()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        if with_adamw:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sync()
        t3 = time.perf_counter()
        if s < warmup:
            log(f"warm-up step {s + 1}/{warmup}: {1e3 * (t3 - t0):.0f} ms, loss {loss.item():.4f}")
            if s == warmup - 1:
                warmup_s = time.perf_counter() - t_warm
        else:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            upd.append((t3 - t2) * 1e3)
    if not fwd:
        print("no timed steps (steps 0)", file=sys.stderr)
        sys.exit(1)
    med = lambda v: sorted(v)[len(v) // 2]
    f, b, u = med(fwd), med(bwd), med(upd)
    n = sum(p.numel() for p in model.parameters()) - model.wpe.weight.numel() - (rows - V) * C
    tok_s = B * T / ((f + b + u) / 1e3)
    tflops = (6 * n + 6 * L * C * T) * tok_s / 1e12
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    peak = 989.0 if ("H100" in name or "H200" in name) else 0.0  # dense bf16, datasheet
    mfu = 100 * tflops / peak if peak else 0.0
    alloc = torch.cuda.max_memory_allocated() / 2**20 if dev == "cuda" else None
    reserved = torch.cuda.max_memory_reserved() / 2**20 if dev == "cuda" else None
    what = {"none": "torch-eager", "full": "torch-compile", "regional": "torch-compile-regional"}[
        a.compile] + " bf16" + (f" + AdamW({adamw_name})" if with_adamw else "")
    print(f"gpu: {name}; torch {torch.__version__}; loss {loss.item():.4f}")
    print(f"phase     ms (median of {len(fwd)} steady steps; {warmup} warm-up steps in "
          f"{warmup_s or 0:.1f} s)\nforward   {f:.2f}\nbackward  {b:.2f}\n"
          f"optimizer {u:.2f}\nstep      {f + b + u:.2f}")
    mem = ""
    if alloc is not None:
        mem = f", max_memory_allocated {alloc:.0f} MiB, max_memory_reserved {reserved:.0f} MiB"
    print(f"RESULT {what} B={B} T={T}: {f + b + u:.1f} ms/step, {tok_s:.0f} tok/s, "
          f"{tflops:.1f} TFLOP/s, MFU {mfu:.1f}% of {peak:.0f}{mem}", flush=True)
    print("RESULT_JSON " + json.dumps({
        "what": what, "device": name, "torch": torch.__version__, "batch": B, "seq_len": T,
        "compile": a.compile, "adamw": adamw_name if with_adamw else None,
        "step_ms": round(f + b + u, 3),
        "phase_ms_median": {"forward": round(f, 3), "backward": round(b, 3),
                            "optimizer": round(u, 3)},
        "tokens_per_s": round(tok_s, 1), "tflops": round(tflops, 2), "mfu": round(mfu / 100, 4),
        "peak_tflops": peak, "steady_steps": len(fwd), "warmup_steps": warmup,
        "warmup_s": round(warmup_s, 2) if warmup_s is not None else None,
        "max_memory_allocated_mib": round(alloc, 1) if alloc is not None else None,
        "max_memory_reserved_mib": round(reserved, 1) if reserved is not None else None,
        "final_loss": round(loss.item(), 5)}), flush=True)


if __name__ == "__main__":
    main()
