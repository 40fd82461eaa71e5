"""PyTorch's CPU attention on the shapes of dev/bench/attention_cpu.c.

    /usr/bin/python3 dev/bench/attention_torch.py               T 1024 2048 4096 8192, 2 threads
    /usr/bin/python3 dev/bench/attention_torch.py -t 1024 -j 1

Debian's python3-torch (apt-get install python3-torch; /usr/bin/python3 is
Debian's python). B 1, NH heads of HS, T queries against T keys, fp32, random
data: "full" is attention without a mask (every pair visible), "diagonal" causal
attention (is_causal=True), the two blocks the C benchmark times. Forward is
scaled_dot_product_attention; backward is the backward of sum(O * dO), timed
from a retained forward graph (so it excludes the forward). Each is repeated for
-s seconds (at least once) and the fastest run is printed, in ms of wall time
with the process's CPU time of that run beside it, in the C benchmark's format.

torch >= 2.0 has torch.nn.functional.scaled_dot_product_attention; Debian 12's
torch 1.13 has the same computation as the private _scaled_dot_product_attention
(which returns the output and the weights); the line says which ran.
"""
import argparse
import time

import torch
import torch.nn.functional as F


def sdpa_function():
    if hasattr(F, "scaled_dot_product_attention"):
        return "scaled_dot_product_attention", F.scaled_dot_product_attention
    if hasattr(F, "_scaled_dot_product_attention"):
        def sdpa(q, k, v, is_causal):
            return F._scaled_dot_product_attention(q, k, v, None, 0.0, False, is_causal)[0]
        return "_scaled_dot_product_attention", sdpa
    raise SystemExit(f"torch {torch.__version__} has no scaled_dot_product_attention")


def fastest(fn, min_seconds):
    """fn() returns (wall, cpu) seconds of what it timed; the fastest run's, in ms"""
    best, spent, runs = (float("inf"), 0.0), 0.0, 0
    while runs == 0 or spent < min_seconds:
        wall, cpu = fn()
        best, spent, runs = min(best, (wall, cpu)), spent + wall, runs + 1
    return best[0] * 1e3, best[1] * 1e3


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def bench(T, NH, HS, min_seconds, name, sdpa):
    g = torch.Generator().manual_seed(42)
    shape = (1, NH, T, HS)
    q, k, v, dout = (torch.rand(shape, generator=g) * 2 - 1 for _ in range(4))
    for block, causal in (("full", False), ("diagonal", True)):
        qg, kg, vg = (x.clone().requires_grad_(True) for x in (q, k, v))

        def forward():
            with torch.no_grad():
                return timed(lambda: sdpa(qg, kg, vg, is_causal=causal))

        def backward():
            qg.grad = kg.grad = vg.grad = None
            out = sdpa(qg, kg, vg, is_causal=causal)
            return timed(lambda: out.backward(dout))

        fwd, bwd = fastest(forward, min_seconds), fastest(backward, min_seconds)
        print(f"T_local {T:5d}  {block:<8s}  torch  forward {fwd[0]:10.2f} ms (cpu {fwd[1]:10.2f})  "
              f"backward {bwd[0]:10.2f} ms (cpu {bwd[1]:10.2f})  ({name})", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-t", default="1024,2048,4096,8192", help="T_local list, comma-separated")
    p.add_argument("-n", type=int, default=4, help="heads")
    p.add_argument("-d", type=int, default=64, help="head size")
    p.add_argument("-j", type=int, default=2, help="threads (torch.set_num_threads)")
    p.add_argument("-s", type=float, default=1.0, help="seconds per measurement")
    a = p.parse_args()
    lengths = [int(x) for x in a.t.split(",")]
    if min(lengths) <= 0 or a.n <= 0 or a.d <= 0 or a.j <= 0 or a.s < 0:
        p.error("lengths, heads, head size and threads must be positive, seconds >= 0")
    torch.set_num_threads(a.j)
    name, sdpa = sdpa_function()
    print(f"# torch {torch.__version__}, B 1, NH {a.n}, HS {a.d}, {torch.get_num_threads()} threads")
    for T in lengths:
        bench(T, a.n, a.d, a.s, name, sdpa)


if __name__ == "__main__":
    main()
