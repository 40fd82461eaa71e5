"""
GPT-2 in plain PyTorch with llm.c's shapes, the anchor of dev/bench/gpu_bench.sh:
tied token embedding and lm head over the padded vocabulary (Vp 50304), learned
position embedding, pre-layernorm blocks, tanh GELU, causal attention through
scaled_dot_product_attention (a plain masked softmax where torch has none), AdamW
(fused where torch has it). Eager mode: torch.compile's minutes of compilation do
not fit the benchmark's time on the GPU machine.

    python3 dev/bench/gpt2_torch.py -t 1024 -b 16 -p bf16              GPT-2 124M (d12)
    python3 dev/bench/gpt2_torch.py -t 64 -b 2 -L 2 -C 64 -NH 2 -V 512 -d cpu   a tiny one

-p bf16: fp32 parameters and AdamW state, the forward pass and its backward under
torch.autocast(bfloat16) (llm.c's mixed precision: bf16 matmuls with fp32
accumulation, fp32 master weights); tf32: fp32 with TF32 matmuls; fp32: exact
fp32. Times -x training steps after two warm-ups (CUDA events on the GPU) and
prints one line:

    torch gpt2 L 12 C 768 NH 12 bf16 B 16 T 1024: 92.31 ms per step, 177487 tok/s, peak 12345 MiB allocated

(the median step; peak: torch.cuda.max_memory_allocated, what the tensors held at
most; gpu_bench.sh measures the process's device memory itself, the same way for
every contender).
"""
import argparse
import math
import sys
import time


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("-t", type=int, default=1024, help="sequence length T")
    p.add_argument("-b", type=int, default=8, help="batch B")
    p.add_argument("-p", choices=["bf16", "tf32", "fp32"], default="bf16", help="precision")
    p.add_argument("-x", type=int, default=5, help="timed steps")
    p.add_argument("-L", type=int, default=12, help="layers")
    p.add_argument("-C", type=int, default=768, help="channels")
    p.add_argument("-NH", type=int, default=12, help="heads")
    p.add_argument("-V", type=int, default=50304, help="padded vocabulary (lm head rows)")
    p.add_argument("-d", default="cuda", help="device: cuda or cpu")
    return p.parse_args()


def build(torch, a):
    nn, F = torch.nn, torch.nn.functional
    L, NH, C, V, T = a.L, a.NH, a.C, a.V, a.t
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    def attention(q, k, v):  # (B, NH, T, HS) each
        if sdpa is not None:
            return sdpa(q, k, v, is_causal=True)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        return scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):  # (B, T, C)
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (y.view(B, T, NH, C // NH).transpose(1, 2) for y in (q, k, v))
            y = attention(q, k, v).transpose(1, 2).reshape(B, T, C)
            x = x + self.proj(y)
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)

        def forward(self, idx, targets):  # (B, T) each
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.lnf(x) @ self.wte.weight.t()  # (B, T, V): the tied lm head
            return F.cross_entropy(logits.view(-1, V).float(), targets.view(-1))

    model = GPT()
    for name, w in model.named_parameters():  # GPT-2's init (llm.c's, less its residual scaling)
        if name.endswith("bias"):
            nn.init.zeros_(w)
        elif w.dim() == 2:
            nn.init.normal_(w, std=0.02)
    return model


def main():
    a = parse()
    try:
        import torch
    except ImportError:
        sys.exit("error: gpt2_torch.py needs torch")
    if a.d == "cuda" and not torch.cuda.is_available():
        sys.exit("error: torch sees no GPU (-d cpu runs on the CPU)")
    if a.C % a.NH != 0:
        sys.exit(f"error: -C {a.C} is not divisible by -NH {a.NH}")
    torch.manual_seed(0)
    gpu = a.d == "cuda"
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = a.p == "tf32"
        torch.backends.cudnn.allow_tf32 = a.p == "tf32"
    model = build(torch, a).to(a.d)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=gpu)
    except TypeError:  # torch < 2.0: no fused AdamW
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    idx = torch.randint(0, min(a.V, 50257), (a.b, a.t), device=a.d)
    tgt = torch.randint(0, min(a.V, 50257), (a.b, a.t), device=a.d)
    losses = []

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=a.d, dtype=torch.bfloat16, enabled=a.p == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        losses.append(loss.detach())

    def timed():
        if gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end)
        t0 = time.perf_counter()
        step()
        return 1000.0 * (time.perf_counter() - t0)

    for _ in range(2):
        timed()
    times = sorted(timed() for _ in range(a.x))
    ms = times[len(times) // 2]
    first, last = float(losses[0]), float(losses[-1])
    # a random init predicts about uniformly: a first loss far from ln(V) is a broken model
    if not (math.isfinite(last) and abs(first - math.log(a.V)) < 1.0):
        sys.exit(f"error: losses {first} -> {last}, expected to start near ln({a.V}) = {math.log(a.V):.2f}")
    peak = f", peak {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB allocated" if gpu else ""
    print(f"torch gpt2 L {a.L} C {a.C} NH {a.NH} {a.p} B {a.b} T {a.t}: {ms:.2f} ms per step, "
          f"{a.b * a.t / (ms / 1000.0):.0f} tok/s{peak} (loss {first:.4f} -> {last:.4f})")


if __name__ == "__main__":
    main()
