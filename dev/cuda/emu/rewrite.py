"""
The sources as the CUDA emulation compiles them (dev/cuda/emu/run.sh):

    python3 dev/cuda/emu/rewrite.py REPO OUT

copies cp/, llmc/, test/ (and test/lib/), train/, dev/bench/, dev/cuda/gpu_probe.cu, dev/cuda/emu/checks_test.cu,
train_gpt2cp.cu and train_common.h from REPO to
OUT with the CUDA syntax that a C++ compiler cannot read turned into calls of the
emulator (cuda_emu.h):

  kernel<<<grid, block, shared, stream>>>(args)  make_launcher(kernel, grid, block, shared, stream)(args)
  extern __shared__ float shared[];              float *shared = (float *)emu_dynamic_shared();
  __shared__ T name[N];                          T (&name)[N] = emu_static_shared<T[N]>(__FILE__, __LINE__);
  __launch_bounds__(X) kernel(...) {             ... { emu_launch_bounds_check(X);

and numbers every synchronisation site of the library code (cp/, llmc/): each
__syncthreads, __syncwarp and cp_async_wait statement, and each cudaStreamWaitEvent and
cudaEventSynchronize call, which the emulator skips when EMU_MUTATE names its
number (the mutation test, dev/cuda/emu/mutations.sh). The sites are listed in
OUT/mutation_sites.txt, one per line: number, file:line, what.
"""
import os
import re
import shutil
import sys

SOURCES = ('.h', '.cuh', '.cu', '.c')
# a kernel name, with its template arguments if any: kernel<<<...>>>( or kernel<P, D><<<...>>>(
LAUNCH = re.compile(r'(\w+(?:<[^<>;()]*>)?)<<<(.+?)>>>\(')
DYNAMIC_SHARED = re.compile(r'extern\s+__shared__\s+(\w+)\s+(\w+)\[\];')
STATIC_SHARED = re.compile(r'__shared__\s+([\w:]+(?:\s*\*)?)\s+(\w+)((?:\[[^\]]+\])+);')
LAUNCH_BOUNDS = re.compile(r'__launch_bounds__\((.+?)\)(\s+\w+\s*\([^)]*\)\s*\{)')
BARRIER = re.compile(r'\b(__syncthreads\(\)|__syncwarp\([^;]*\)|cp_async_wait<\d+>\(\));')
EVENT_WAIT = re.compile(r'\b(cudaStreamWaitEvent|cudaEventSynchronize)\(')


def code_spans(text):
    """Yields (start, end) of the parts of text outside comments and strings."""
    i, start, n = 0, 0, len(text)
    while i < n:
        if text.startswith('//', i):
            yield start, i
            i = text.find('\n', i)
            i = n if i < 0 else i
            start = i
        elif text.startswith('/*', i):
            yield start, i
            i = text.find('*/', i + 2)
            i = n if i < 0 else i + 2
            start = i
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            i = j + 1
        else:
            i += 1
    yield start, n


def number_sites(text, path, sites):
    """Wraps each synchronisation site of the code in text in an EMU_MUTATE switch."""
    out, last = [], 0
    for start, end in code_spans(text):
        out.append(text[last:start])
        code = text[start:end]

        def site(what):
            sites.append((len(sites) + 1, path, text.count('\n', 0, start + m.start()) + 1, what))
            return len(sites)

        pieces, pos = [], 0
        for m in sorted(list(BARRIER.finditer(code)) + list(EVENT_WAIT.finditer(code)), key=lambda m: m.start()):
            pieces.append(code[pos:m.start()])
            if m.re is BARRIER:
                pieces.append('if (!emu_mutated(%d)) { %s; }' % (site(m.group(1)), m.group(1)))
            else:
                pieces.append('emu_site(%d, %s)(' % (site(m.group(1)), m.group(1)))
            pos = m.end()
        pieces.append(code[pos:])
        out.append(''.join(pieces))
        last = end
    out.append(text[last:])
    return ''.join(out)


def rewrite(text):
    text = DYNAMIC_SHARED.sub(r'\1 *\2 = (\1 *)emu_dynamic_shared();', text)
    text = STATIC_SHARED.sub(r'\1 (&\2)\3 = emu_static_shared<\1\3>(__FILE__, __LINE__);', text)
    text = LAUNCH_BOUNDS.sub(r'\2 emu_launch_bounds_check(\1);', text)
    return LAUNCH.sub(r'make_launcher(\1, \2)(', text)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    sites = []
    for d, kinds in [('cp', SOURCES), ('llmc', SOURCES), ('test', SOURCES), ('test/lib', SOURCES),
                     ('train', SOURCES), ('dev/bench', SOURCES), ('dev/cuda', ('.cu',)),
                     ('dev/cuda/emu', ('.cu',))]:
        os.makedirs(os.path.join(dst, d), exist_ok=True)
        for f in sorted(os.listdir(os.path.join(src, d))):
            p = os.path.join(src, d, f)
            if not os.path.isfile(p) or not f.endswith(kinds):
                continue
            text = open(p).read()
            if f.endswith(('.cuh', '.cu')):
                if d in ('cp', 'llmc'):
                    text = number_sites(text, d + '/' + f, sites)
                text = rewrite(text)
            open(os.path.join(dst, d, f), 'w').write(text)
    text = open(os.path.join(src, 'train_gpt2cp.cu')).read()
    open(os.path.join(dst, 'train_gpt2cp.cu'), 'w').write(rewrite(text))
    shutil.copy(os.path.join(src, 'train_common.h'), dst)
    with open(os.path.join(dst, 'mutation_sites.txt'), 'w') as f:
        for number, path, line, what in sites:
            f.write('%d %s:%d %s\n' % (number, path, line, what))


if __name__ == '__main__':
    main()
