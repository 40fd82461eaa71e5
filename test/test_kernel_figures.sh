#!/usr/bin/env bash
# dev/bench/kernel_figures.sh's table from a small hand-made ptxas -v output, PTX and
# launch shapes (--from), against the rows worked out by hand below; and its refusals
# of a kernel without a launch shape and of a launch past its __launch_bounds__. No
# GPU or nvcc needed; c++filt (binutils) names the kernels.
#
#     bash test/test_kernel_figures.sh            exits 77 without c++filt
set -euo pipefail
cd "$(dirname "$0")/.."
command -v c++filt > /dev/null || { echo "SKIP: no c++filt (binutils) to name the kernels"; exit 77; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/BF16"
FWD64=_Z21attend_forward_kernelIL12MmaPrecision2ELi64EEv13AttnBlockArgs
DQ64=_Z25attend_backward_dq_kernelIL12MmaPrecision2ELi64EEv13AttnBlockArgs
DKV64=_Z26attend_backward_dkv_kernelIL12MmaPrecision2ELi64EEv13AttnBlockArgs
FWD32=_Z21attend_forward_kernelIL12MmaPrecision2ELi32EEv13AttnBlockArgs
# ptxas -v as nvcc prints it; the forward kernel calls a function whose own spills are
# listed first and are not the kernel's
cat > "$WORK/BF16/ptxas.txt" << EOF
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z11fill_kernelPffm' for 'sm_90'
ptxas info    : Function properties for _Z11fill_kernelPffm
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers, 400 bytes cmem[0]
ptxas info    : Compiling entry function '$FWD64' for 'sm_90'
ptxas info    : Function properties for _Z6helperv
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Function properties for $FWD64
    32 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '$DQ64' for 'sm_90'
ptxas info    : Function properties for $DQ64
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 400 bytes cmem[0]
ptxas info    : Compiling entry function '$DKV64' for 'sm_90'
ptxas info    : Function properties for $DKV64
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 1 barriers, 400 bytes cmem[0]
ptxas info    : Compiling entry function '$FWD32' for 'sm_90'
ptxas info    : Function properties for $FWD32
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 200 registers, used 0 barriers, 400 bytes cmem[0]
EOF
# The forward kernel holds (predicated ones too) 3 mma, 3 ld.shared, 3 ldmatrix, 4 cvt
# of bf16 or tf32 (not the integer ones, not cvta), 3 cp.async copies (not
# commit_group, wait_group); the function it calls holds more, which are not its
cat > "$WORK/BF16/kernels.ptx" << EOF
.visible .entry _Z11fill_kernelPffm(
	.param .u64 _Z11fill_kernelPffm_param_0
)
{
	ld.shared.f32 	%f1, [%r1];
	ret;
}
.func _Z6helperv()
{
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 	{%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};
	ld.shared.f32 	%f5, [%r7];
	ret;
}
.entry $FWD64(
	.param .align 8 .b8 ${FWD64}_param_0[256]
)
.maxntid 128, 1, 1
{
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 	{%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 	{%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};
	@%p1 mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 	{%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};
	ld.shared.v4.f32 	{%f5, %f6, %f7, %f8}, [%r8];
	ld.shared.u32 	%r9, [%r8+16];
	@!%p2 ld.shared.b32 	%r10, [%r8+32];
	st.shared.f32 	[%r8], %f5;
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 	{%r1, %r2, %r3, %r4}, [%r11];
	ldmatrix.sync.aligned.m8n8.x4.shared.b16 	{%r1, %r2, %r3, %r4}, [%r12];
	ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 	{%r5, %r6}, [%r13];
	cvt.rn.bf16x2.f32 	%r14, %f1, %f2;
	cvt.rn.bf16x2.f32 	%r15, %f3, %f4;
	cvt.rna.tf32.f32 	%r16, %f5;
	cvt.f32.bf16 	%f9, %rs1;
	cvt.u32.u64 	%r17, %rd1;
	cvt.rn.f32.s32 	%f10, %r18;
	cvta.to.shared.u64 	%rd2, %rd3;
	cp.async.cg.shared.global [%r19], [%rd4], 16, %r20;
	@%p3 cp.async.cg.shared.global [%r21], [%rd5], 16, %r20;
	cp.async.ca.shared.global [%r22], [%rd6], 8, %r23;
	cp.async.commit_group;
	cp.async.wait_group 1;
	call.uni _Z6helperv, ();
	ret;
}
.entry $DQ64(
	.param .align 8 .b8 ${DQ64}_param_0[256]
)
{
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 	{%f1, %f2, %f3, %f4}, {%r1, %r2, %r3, %r4}, {%r5, %r6}, {%f1, %f2, %f3, %f4};
	ret;
}
.entry $DKV64(
	.param .align 8 .b8 ${DKV64}_param_0[256]
)
{
	ld.shared.f32 	%f1, [%r1];
	ld.shared.f32 	%f2, [%r2];
	ret;
}
.entry $FWD32(
	.param .align 8 .b8 ${FWD32}_param_0[256]
)
{
	ret;
}
EOF
printf '%s\t%s\t%s\n' "attend_forward_kernel<(MmaPrecision)2, 64>" 128 100000 \
    "attend_backward_dq_kernel<(MmaPrecision)2, 64>" 128 16384 \
    "attend_backward_dkv_kernel<(MmaPrecision)2, 64>" 512 4096 \
    "attend_forward_kernel<(MmaPrecision)2, 32>" 64 0 "fill_kernel" 32 0 > "$WORK/BF16/shapes.txt"
# Blocks per SM, the least of (registers: ceil(regs x 32 / 256) x 256 per warp, whole
# warps in each of 4 sub-partitions of 16384; shared: static + dynamic + 1024 rounded
# up to 128, in 233472; threads: 2048; blocks: 32):
#   forward 64: 168 x 32 = 5376 per warp, 3 warps a sub-partition, 12 an SM: 3 blocks
#               of 4 warps; 2048 + 100000 + 1024 = 103072 -> 103168: 2 blocks; 16 by
#               threads -> 2 blocks, 8 of 64 warps = 12.5%; shared 102048 B = 99.7 KiB
#   dq 64:      255 x 32 = 8160 -> 8192 per warp, 2 a sub-partition, 8 an SM: 2 blocks;
#               17408: 13; 16 -> 2 blocks, 12.5%; 16384 B = 16.0 KiB
#   dkv 64:     24 x 32 = 768 per warp, 21 a sub-partition, 84 an SM: 5 blocks of 16
#               warps; 5120: 45; 2048 / 512 = 4 -> 4 blocks, 64 warps = 100.0%
#   forward 32: 200 x 32 = 6400 per warp, 2 a sub-partition (not 10 of 65536 in one):
#               8 an SM, 4 blocks of 2 warps; 1024: 228; 32 -> 4 blocks, 12.5%
#   fill:       10 x 32 = 320 -> 512 per warp, 32 a sub-partition: 128 blocks of 1
#               warp; 228; 64; at most 32 -> 32 blocks, 32 warps = 50.0%
cat > "$WORK/expected.md" << 'EOF'
| build | kernel | threads | regs | spills st/ld (B) | shared (KiB) | blocks/SM | limit | occupancy | mma | ld.shared | ldmatrix | cvt | cp.async |
| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |
| BF16 | attend_forward_kernel<bf16, 64> | 128 | 168 | 12 / 20 | 99.7 | 2 | shared | 12.5% | 3 | 3 | 3 | 4 | 3 |
| BF16 | attend_backward_dq_kernel<bf16, 64> | 128 | 255 | 0 / 0 | 16.0 | 2 | regs | 12.5% | 1 | 0 | 0 | 0 | 0 |
| BF16 | attend_backward_dkv_kernel<bf16, 64> | 512 | 24 | 0 / 0 | 4.0 | 4 | threads | 100.0% | 0 | 2 | 0 | 0 | 0 |
| BF16 | attend_forward_kernel<bf16, 32> | 64 | 200 | 0 / 0 | 0.0 | 4 | regs | 12.5% | 0 | 0 | 0 | 0 | 0 |
| BF16 | fill_kernel | 32 | 10 | 0 / 0 | 0.0 | 32 | blocks | 50.0% | 0 | 1 | 0 | 0 | 0 |
EOF
status=0
if bash dev/bench/kernel_figures.sh --from "$WORK" > "$WORK/got.md" && diff "$WORK/expected.md" "$WORK/got.md"; then
    echo "ok   the table of the hand-made sample, as worked out by hand"
else
    echo "FAIL: kernel_figures.sh's table of the sample differs from the expected one (above)"; status=1
fi
# a kernel of the PTX that -k did not list; a launch past the kernel's .maxntid
refused() {
    local what=$1 expected=$2
    if bash dev/bench/kernel_figures.sh --from "$WORK" > /dev/null 2> "$WORK/err.txt"; then
        echo "FAIL: $what: the table was printed"; status=1
    elif ! grep -qF -- "$expected" "$WORK/err.txt"; then
        echo "FAIL: $what: not refused for it:"; cat "$WORK/err.txt"; status=1
    else
        echo "ok   $what: $(cat "$WORK/err.txt")"
    fi
}
cp "$WORK/BF16/shapes.txt" "$WORK/shapes.txt"
sed -i '/dkv/d' "$WORK/BF16/shapes.txt"
refused "a kernel without a launch shape" "attend_backward_dkv_kernel<(MmaPrecision)2, 64> is in the PTX but not"
sed 's/^\(attend_forward_kernel<(MmaPrecision)2, 64>\t\)128/\164/' "$WORK/shapes.txt" > "$WORK/BF16/shapes.txt"
refused "a launch of 64 threads, __launch_bounds__ 128" "launched with 64 threads but its __launch_bounds__ says 128"
[[ $status -eq 0 ]] && echo "PASS: kernel_figures.sh reads ptxas, the PTX and the launch shapes as worked out by hand"
exit $status
