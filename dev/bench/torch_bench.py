"""
PyTorch's side of dev/bench/gpu_bench.sh: the same shapes and precision as the C
benchmarks, on the same GPU, as the anchor. Without torch (or without a GPU) each
mode prints one 'skipped' line and exits 0, so the benchmark carries on.

    python3 dev/bench/torch_bench.py attention -t 4096 -b 1 -nh 12 -hs 64 -f 1
        scaled_dot_product_attention, causal, fp32 tensors; -f 1 lets the matmuls use
        TF32 (torch.backends.cuda.matmul.allow_tf32), -f 0 forbids it. Forward and
        forward + backward, median of CUDA-event timings.
    python3 dev/bench/torch_bench.py gpt2 -t 1024 -b 8 -f 1
        one training step of GPT-2 124M (12 layers, 12 heads, 768 channels, vocab
        50304, SDPA attention, AdamW), fp32 parameters; tokens per second.
    python3 dev/bench/torch_bench.py checkpoint -t 16384 -o FILE
        writes an llm.c fp32 checkpoint of GPT-2 124M with max_seq_len T (random
        weights, no torch needed), so that train_gpt2cp can run d12 at T > 1024.
"""
import argparse
import array
import random
import struct
import sys


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["attention", "gpt2", "checkpoint"])
    p.add_argument("-t", type=int, default=1024)
    p.add_argument("-b", type=int, default=1)
    p.add_argument("-nh", type=int, default=12)
    p.add_argument("-hs", type=int, default=64)
    p.add_argument("-f", type=int, default=1)
    p.add_argument("-r", type=int, default=20, help="timed repetitions")
    p.add_argument("-o", default="")
    return p.parse_args()


def torch_or_skip(what):
    try:
        import torch
    except ImportError:
        print(f"{what}: skipped (no torch)")
        sys.exit(0)
    if not torch.cuda.is_available():
        print(f"{what}: skipped (torch sees no GPU)")
        sys.exit(0)
    return torch


def median_ms(torch, fn, repeats):
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def attention(a):
    what = f"torch sdpa {'tf32' if a.f else 'fp32'} B {a.b} T {a.t} NH {a.nh} HS {a.hs}"
    torch = torch_or_skip(what)
    torch.backends.cuda.matmul.allow_tf32 = bool(a.f)
    torch.backends.cudnn.allow_tf32 = bool(a.f)
    F = torch.nn.functional
    shape = (a.b, a.nh, a.t, a.hs)
    q, k, v = (torch.rand(shape, device="cuda") * 2 - 1 for _ in range(3))
    for x in (q, k, v):
        x.requires_grad_(True)
    dout = torch.rand(shape, device="cuda") * 2 - 1

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.backward(dout)

    fwd = median_ms(torch, forward, a.r)
    both = median_ms(torch, forward_backward, a.r)
    flops = 4.0 * a.b * a.nh * a.t * a.t * a.hs / 2.0
    bwd = max(both - fwd, 1e-9)
    print(f"{what}: forward {fwd:.3f} ms ({flops / (fwd * 1e9):.1f} TFLOP/s), "
          f"backward {bwd:.3f} ms ({2.5 * flops / (bwd * 1e9):.1f} TFLOP/s)")


def gpt2(a):
    what = f"torch gpt2-124M step {'tf32' if a.f else 'fp32'} B {a.b} T {a.t}"
    torch = torch_or_skip(what)
    torch.backends.cuda.matmul.allow_tf32 = bool(a.f)
    torch.backends.cudnn.allow_tf32 = bool(a.f)
    nn, F = torch.nn, torch.nn.functional
    L, NH, C, V = 12, 12, 768, 50304

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (y.view(B, T, NH, C // NH).transpose(1, 2) for y in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
            x = x + self.proj(y)
            return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(a.t, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.lnf(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    idx = torch.randint(0, 50257, (a.b, a.t), device="cuda")
    tgt = torch.randint(0, 50257, (a.b, a.t), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        model(idx, tgt).backward()
        opt.step()

    ms = median_ms(torch, step, max(3, a.r // 4))
    print(f"{what}: {ms:.2f} ms per step, {a.b * a.t / (ms / 1000.0):.0f} tok/s")


def checkpoint(a):
    # llm.c's fp32 checkpoint: 256 int32 header, then the parameters in its order
    L, NH, C, V, Vp, T = 12, 12, 768, 50257, 50304, a.t
    sizes = [Vp * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
             L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C]
    header = [0] * 256
    header[:8] = [20240326, 3, T, V, L, NH, C, Vp]
    rng = random.Random(1234)
    # N(0, 0.02)-like values, one random block repeated: quick in plain python,
    # and never zeros (they would time differently)
    block = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(1 << 16)))
    with open(a.o, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for n in sizes:
            while n > 0:
                m = min(n, len(block))
                f.write(block[:m].tobytes())
                n -= m
    print(f"wrote {a.o}: GPT-2 124M, max_seq_len {T}, {sum(sizes)} parameters")


if __name__ == "__main__":
    args = parse()
    {"attention": attention, "gpt2": gpt2, "checkpoint": checkpoint}[args.mode](args)
