#!/usr/bin/env python3
"""
An independent reference for llm.c's random init (`-e dN`), written from llm.c's
published recipe (train_gpt2.cu gpt_build_from_descriptor, llmc/rand.h), sharing
no code with the trainer:

  * the generator is CPython's own Mersenne Twister (the `random` module), put in
    the state of init_genrand(seed) through random.setstate;
  * normal_ of n >= 16 values: n float uniforms (24 bits / 2^24), Box-Muller on
    each block of 16 (pair t with t + 8) in float32 arithmetic (libm's logf,
    sqrtf, cosf, sinf through ctypes, each product rounded to float32), and for
    n % 16 != 0 the last 16 slots drawn and transformed again; n < 16 draws
    double pairs;
  * the order: wte (V real rows), wpe, then per layer qkvw, attprojw, fcw,
    fcprojw; std 0.02, and 0.02 / sqrt(2 L) for attprojw and fcprojw; biases 0,
    layernorm weights 1, the padded vocabulary rows 0; seed 42.

    random_init_reference.py model MODEL.bin     every tensor of an llm.c fp32
        checkpoint written from -e dN (wte: 256 blocks of 16 spread over it, all
        else in full), bit for bit
    random_init_reference.py normals SEED N STD  reads hex floats (one a line) on
        stdin and checks them against normal_ of N values, bit for bit
Exit 0 when everything matches; otherwise the first mismatches and exit 1.
"""
import ctypes
import ctypes.util
import math
import random
import struct
import sys

libm = ctypes.CDLL(ctypes.util.find_library("m"))
for name in ("logf", "sqrtf", "cosf", "sinf"):
    getattr(libm, name).argtypes = [ctypes.c_float]
    getattr(libm, name).restype = ctypes.c_float


def f32(x):
    """x rounded to the nearest float32"""
    return struct.unpack("<f", struct.pack("<f", x))[0]


EPS = f32(1e-12)


class Twister:
    """MT19937 seeded as init_genrand(seed), drawing through CPython's generator"""

    def __init__(self, seed):
        mt = [seed & 0xFFFFFFFF]
        for j in range(1, 624):
            mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + j) & 0xFFFFFFFF)
        self.rng = random.Random()
        self.rng.setstate((3, tuple(mt + [624]), None))  # 624: regenerate before the first draw

    def u32(self):
        return self.rng.getrandbits(32)

    def uniforms(self, n):
        bits = self.rng.getrandbits
        return [(bits(32) & 0xFFFFFF) / 16777216.0 for _ in range(n)]

    def double(self):
        hi = self.u32()
        lo = self.u32()
        return (((hi << 32) | lo) & ((1 << 53) - 1)) / 9007199254740992.0


def box_muller_16(u, std):
    """the 16 normals of 16 uniforms u (floats), in float32 arithmetic"""
    out = [0.0] * 16
    for t in range(8):
        one_minus = f32(1.0 - u[t])
        radius = libm.sqrtf(f32(-2.0 * libm.logf(f32(one_minus + EPS))))
        theta = f32(2.0 * math.pi * u[t + 8])
        out[t] = f32(f32(radius * libm.cosf(theta)) * std)
        out[t + 8] = f32(f32(radius * libm.sinf(theta)) * std)
    return out


class Normals:
    """normal_(n) with PyTorch's draws; values of blocks computed on demand"""

    def __init__(self, tw, n, std):
        self.n, self.std = n, std
        self.small = None
        if n < 16:
            self.small = []
            for i in range(0, n, 2):
                u1, u2 = f32(tw.double()), f32(tw.double())
                radius = libm.sqrtf(f32(-2.0 * libm.logf(f32(f32(1.0 - u2) + EPS))))
                theta = f32(2.0 * math.pi * u1)
                self.small.append(f32(f32(radius * libm.cosf(theta)) * std))
                self.small.append(f32(f32(radius * libm.sinf(theta)) * std))
            self.small = self.small[:n]
            return
        self.u = tw.uniforms(n)
        self.tail = None
        if n % 16 != 0:
            self.tail = box_muller_16(tw.uniforms(16), std)

    def block_values(self, b):
        """(index, value) of block b: indices 16b .. 16b+15 that exist"""
        if self.small is not None:
            return list(enumerate(self.small))
        lo, hi = 16 * b, min(16 * b + 16, self.n)
        values = {}
        if lo + 16 <= self.n:
            values.update(zip(range(lo, lo + 16), box_muller_16(self.u[lo:lo + 16], self.std)))
        if self.tail is not None and hi > self.n - 16:
            values.update(zip(range(self.n - 16, self.n), self.tail))
        return [(i, values[i]) for i in range(lo, hi)]

    def all_values(self):
        return [v for b in range((self.n + 15) // 16) for _, v in self.block_values(b)]


def check_model(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        data = f.read()
    if header[0] != 20240326 or header[1] != 3:
        sys.exit(f"FAIL: {path}: not an llm.c fp32 checkpoint (header {header[:2]})")
    maxT, V, L, NH, C, Vp = header[2:8]
    sizes = [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
             L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C]
    names = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
             "fcprojw", "fcprojb", "lnfw", "lnfb"]
    if len(data) != 4 * sum(sizes):
        sys.exit(f"FAIL: {path}: {len(data)} bytes of parameters, expected {4 * sum(sizes)}")
    offsets = {}
    at = 0
    for name, n in zip(names, sizes):
        offsets[name] = at
        at += n

    def param(name, i):
        return struct.unpack_from("<f", data, 4 * (offsets[name] + i))[0]

    bad = []
    checked = 0

    def expect(name, i, want):
        nonlocal checked
        got = param(name, i)
        checked += 1
        if struct.pack("<f", got) != struct.pack("<f", want) and len(bad) < 10:
            bad.append(f"{name}[{i}]: {got!r}, the reference {want!r}")

    tw = Twister(42)
    std = f32(0.02)
    residual_std = f32(std * f32(1.0 / libm.sqrtf(f32(2.0 * L))))
    # wte: 256 blocks spread over its V*C values (first and last included); then its padded rows are 0
    wte = Normals(tw, V * C, std)
    nblocks = (V * C + 15) // 16
    for k in range(256):
        for i, v in wte.block_values(k * (nblocks - 1) // 255):
            expect("wte", i, v)
    for i in range(V * C, Vp * C):
        expect("wte", i, 0.0)
    for i, v in enumerate(Normals(tw, maxT * C, std).all_values()):
        expect("wpe", i, v)
    for layer in range(L):
        for name, n, s in (("qkvw", 3 * C * C, std), ("attprojw", C * C, residual_std),
                           ("fcw", 4 * C * C, std), ("fcprojw", 4 * C * C, residual_std)):
            for i, v in enumerate(Normals(tw, n, s).all_values()):
                expect(name, layer * n + i, v)
    for name, value in (("ln1w", 1.0), ("ln1b", 0.0), ("qkvb", 0.0), ("attprojb", 0.0), ("ln2w", 1.0),
                        ("ln2b", 0.0), ("fcb", 0.0), ("fcprojb", 0.0), ("lnfw", 1.0), ("lnfb", 0.0)):
        for i in range(sizes[names.index(name)]):
            expect(name, i, value)
    if bad:
        print(f"FAIL: {path} differs from llm.c's init:")
        print("\n".join("  " + b for b in bad))
        sys.exit(1)
    print(f"ok   {path}: L {L}, C {C}, maxT {maxT}, V {V}: {checked} values are llm.c's init, bit for bit")


def check_normals(seed, n, std):
    got = [float.fromhex(line.strip()) for line in sys.stdin if line.strip()]
    if len(got) != n:
        sys.exit(f"FAIL: {len(got)} values on stdin, expected {n}")
    ref = Normals(Twister(seed), n, f32(std)).all_values()
    bad = [i for i in range(n) if struct.pack("<f", got[i]) != struct.pack("<f", ref[i])]
    if bad:
        i = bad[0]
        sys.exit(f"FAIL: normal_({n}) of seed {seed}: {len(bad)} values differ, first [{i}]: {got[i]!r}, "
                 f"the reference {ref[i]!r}")
    print(f"ok   normal_({n}) of seed {seed}, std {std}: all {n} values bit for bit")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "model":
        check_model(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "normals":
        check_normals(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        sys.exit(__doc__)
