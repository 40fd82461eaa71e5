"""
PyTorch's side of dev/bench/gpu_bench.sh's attention table: the same shapes and
precision as bench_attention_gpu, on the same GPU, as the anchor (the GPT-2
training anchor is dev/bench/gpt2_torch.py). Without torch (or without a GPU) it
prints one 'skipped' line and exits 0.

    python3 dev/bench/torch_bench.py -t 1024 4096 -b 1 -nh 12 -hs 64 -p bf16 tf32
        scaled_dot_product_attention, causal: -p bf16 on bf16 tensors, -p tf32 on fp32
        tensors with TF32 matmuls allowed (torch.backends.cuda.matmul.allow_tf32),
        -p fp32 with TF32 forbidden. Forward and forward + backward, median of
        CUDA-event timings; a line for each precision and T (one process: torch is
        imported once).
"""
import argparse
import sys


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("-t", type=int, nargs="+", default=[1024])
    p.add_argument("-b", type=int, default=1)
    p.add_argument("-nh", type=int, default=12)
    p.add_argument("-hs", type=int, default=64)
    p.add_argument("-p", choices=["bf16", "tf32", "fp32"], nargs="+", default=["bf16"])
    p.add_argument("-r", type=int, default=20, help="timed repetitions")
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


def attention(a, precision, T):
    what = f"torch sdpa {precision} B {a.b} T {T} NH {a.nh} HS {a.hs}"
    torch = torch_or_skip(what)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    F = torch.nn.functional
    shape = (a.b, a.nh, T, a.hs)
    q, k, v = (torch.rand(shape, device="cuda", dtype=dtype) * 2 - 1 for _ in range(3))
    for x in (q, k, v):
        x.requires_grad_(True)
    dout = torch.rand(shape, device="cuda", dtype=dtype) * 2 - 1

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward():
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o.backward(dout)

    fwd = median_ms(torch, forward, a.r)
    both = median_ms(torch, forward_backward, a.r)
    flops = 4.0 * a.b * a.nh * T * T * a.hs / 2.0
    bwd = max(both - fwd, 1e-9)
    print(f"{what}: forward {fwd:.3f} ms ({flops / (fwd * 1e9):.1f} TFLOP/s), "
          f"backward {bwd:.3f} ms ({2.5 * flops / (bwd * 1e9):.1f} TFLOP/s)")


if __name__ == "__main__":
    args = parse()
    for precision in args.p:
        for T in args.t:
            attention(args, precision, T)
