# gpt2cp: context-parallel GPT-2 training in C and CUDA.
#
#   make train_gpt2cp_cpu   the CPU twin (MPI + OpenMP, OpenBLAS when found)
#   make train_gpt2cp       the GPU trainer (CUDA + cuBLAS + NCCL + MPI)
#   make test               installs what is missing, builds, runs the CTest suite
#   make run                installs what is missing, builds, trains the embedded default
#   make encode             ./encode: text to an llm.c token file (GPT-2 BPE; needs libpcre2-dev)
#
# Every target that compiles first checks the Debian packages it needs
# (scripts/install_deps.sh, by the sets below): as root it installs the missing ones,
# otherwise it prints the one command that does and stops.
#
# Options: NO_BLAS=1 (plain C matmuls), NO_OMP=1, SAN=1 (AddressSanitizer and
# UndefinedBehaviorSanitizer on the CPU code), CUDA_HOME=/usr/local/cuda,
# CTEST_ARGS (passed to ctest: CTEST_ARGS="-L 'unit|mpi'" runs the tests of those labels).

MPICC ?= mpicc
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
# (`=`, not `?=`: the tests' environment names their scratch dir BUILD_DIR, and a make
# they run must find the flags stamps where `make test` wrote them; `make BUILD_DIR=D`
# still moves the build)
BUILD_DIR = build

# the package sets (scripts/install_deps.sh) of each target that compiles, checked
# before anything below is read, so that what gets installed (OpenBLAS, MPI's compiler
# wrapper) is found there; not under make -n
DEPS_all = $(DEPS_train_gpt2cp_cpu)
DEPS_train_gpt2cp_cpu = $(if $(filter 1,$(NO_BLAS)),mpi,run)
DEPS_bench_attention = $(DEPS_train_gpt2cp_cpu)
DEPS_bench_attention_cpu = $(DEPS_train_gpt2cp_cpu)
DEPS_bench_classifier = $(DEPS_train_gpt2cp_cpu)
DEPS_bench_sgemm = $(DEPS_train_gpt2cp_cpu)
DEPS_run = run
DEPS_test = test
DEPS_encode = encode
DEPS_cp_layout = cc
DEPS_loss_mask = cc
DEPS_train_gpt2cp = gpu
DEPS_bench_long_fit = gpu
DEPS_bench_attention_gpu = gpu
DEPS_SETS := $(sort $(foreach g,$(or $(MAKECMDGOALS),all),$(DEPS_$(g)) $(if $(filter build/gpu/% $(BUILD_DIR)/gpu/%,$(g)),gpu)))
ifneq ($(DEPS_SETS),)
  ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
    ifneq ($(shell bash scripts/install_deps.sh $(DEPS_SETS) >&2 || echo missing),)
      $(error the packages above are missing (scripts/install_deps.sh $(DEPS_SETS)): install them, then make again)
    endif
  endif
endif

# -fno-math-errno: sqrtf without errno, so that AdamW's loop vectorises (IEEE sqrt and
# division: the same bits as the scalar loop)
CFLAGS = -O3 -march=native -fno-math-errno -Wall -Wextra -Wno-unused-function -std=gnu11
LDLIBS = -lm
DEPS = $(wildcard cp/*.h llmc/*.h train/*.h) train_common.h

ifneq ($(NO_OMP),1)
  CFLAGS += -fopenmp
endif

# OpenBLAS (Debian: libopenblas-openmp-dev) when present, the plain loops otherwise
ifeq ($(NO_BLAS),1)
  CFLAGS += -DNO_BLAS
else
  HAVE_OPENBLAS := $(shell echo 'int main(void){return 0;}' | $(CC) -x c - -include cblas.h -lopenblas -o /dev/null 2>/dev/null && echo yes)
  ifeq ($(HAVE_OPENBLAS),yes)
    LDLIBS += -lopenblas
  else
    CFLAGS += -DNO_BLAS
    # said when the trainer is built, not when make reads this file: `make test`
    # installs OpenBLAS first, and its sub-make then finds it
    NO_OPENBLAS_NOTE = @echo "no OpenBLAS found: building the plain C matmuls (apt-get install libopenblas-openmp-dev for speed)"
  endif
endif

ifeq ($(SAN),1)
  CFLAGS += -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif

# ---------------------------------------------------------------------------
# the GPU trainer: nvcc, MPI's flags from its compiler wrapper, cuBLAS, NCCL.
# NCCL_HOME: where include/nccl.h and lib64/ or lib/ libnccl.so.2 are (default the
# CUDA toolkit; e.g. python3's site-packages/nvidia/nccl of the pip package
# nvidia-nccl-cu13); NO_NCCL=1 builds without it (only -ct mpi then). GPU_ARCH: the
# compute capability to build for (90: H100/H200). PRECISION: BF16 (the default, as
# llm.c) or FP32, the storage precision of the GPU trainer (llmc/precision.cuh).
GPU_ARCH ?= 90
PRECISION ?= BF16
ifeq ($(filter BF16 FP32,$(PRECISION)),)
  $(error PRECISION=$(PRECISION): choose BF16 or FP32)
endif
NCCL_HOME ?= $(CUDA_HOME)
NCCL_LIBDIR ?= $(patsubst %/,%,$(dir $(firstword $(wildcard $(NCCL_HOME)/lib64/libnccl.so.2 $(NCCL_HOME)/lib/libnccl.so.2) $(NCCL_HOME)/lib64/)))
HAVE_NVCC := $(shell command -v $(NVCC) > /dev/null 2>&1 && echo yes)
MPI_COMPILE_FLAGS ?= $(shell $(MPICC) --showme:compile 2>/dev/null)
MPI_LINK_FLAGS ?= $(shell $(MPICC) --showme:link 2>/dev/null)
# nvcc takes -I, -L and -l itself; anything else (-pthread, -Wl,...) goes to the host compiler
nvcc_pass = $(foreach f,$(1),$(if $(filter -I% -L% -l%,$(f)),$(f),-Xcompiler $(f)))
# NO_BLAS: the CPU headers' matmuls (never called on the GPU) need no OpenBLAS;
# OMPI_SKIP_MPICXX: mpi.h without Open MPI's C++ bindings, whose names clash with ours
NVCC_FLAGS = -O3 -std=c++17 -arch=sm_$(GPU_ARCH) -DENABLE_$(PRECISION) -DNO_BLAS -DOMPI_SKIP_MPICXX -DMPICH_SKIP_MPICXX \
	-Xcompiler -Wall,-Wno-unused-function,-Wno-unknown-pragmas -I$(NCCL_HOME)/include
CUDA_LDLIBS = -L$(CUDA_HOME)/lib64 -lcublas -lcublasLt -L$(NCCL_LIBDIR) -l:libnccl.so.2 \
	-Xlinker -rpath,$(CUDA_HOME)/lib64 -Xlinker -rpath,$(NCCL_LIBDIR)
ifeq ($(NO_NCCL),1)
  NVCC_FLAGS += -DNO_NCCL
  CUDA_LDLIBS = -L$(CUDA_HOME)/lib64 -lcublas -lcublasLt -Xlinker -rpath,$(CUDA_HOME)/lib64
endif
CUDA_DEPS = $(wildcard cp/*.h cp/*.cuh llmc/*.h llmc/*.cuh train/*.h) train_common.h
CMAKE_CUDA_ARGS = $(if $(HAVE_NVCC),-DCMAKE_CUDA_COMPILER=$(shell command -v $(NVCC)) -DGPU_ARCH=$(GPU_ARCH))

.PHONY: all test run clean gpu_prep FORCE

# The flags stamps: a file per kind of build holding the flags it was last built
# with, rewritten (by its rule, when a target that needs it is made, never while
# make reads this file) only when they change, so that a change rebuilds what
# depends on it and nothing else does.
# (each stamp sets STAMP_FLAGS for its own recipe, write_flags_stamp)
write_flags_stamp = @mkdir -p $(@D); echo '$(STAMP_FLAGS)' | cmp -s - $@ || echo '$(STAMP_FLAGS)' > $@
FORCE:

all: train_gpt2cp_cpu

# the flags the CPU trainer was last built with: a change (SAN=1, NO_BLAS=1) rebuilds it
CPU_FLAGS_STAMP = $(BUILD_DIR)/cpu_flags
$(CPU_FLAGS_STAMP): STAMP_FLAGS = $(CFLAGS) $(LDLIBS)
$(CPU_FLAGS_STAMP): FORCE
	$(write_flags_stamp)

train_gpt2cp_cpu: train_gpt2cp_cpu.c $(DEPS) $(CPU_FLAGS_STAMP)
	$(NO_OPENBLAS_NOTE)
	$(MPICC) $(CFLAGS) $< -o $@ $(LDLIBS)

# likewise the GPU trainer's (PRECISION=FP32 after a BF16 build rebuilds it)
GPU_FLAGS_STAMP = $(BUILD_DIR)/gpu_flags
$(GPU_FLAGS_STAMP): STAMP_FLAGS = $(NVCC_FLAGS) $(CUDA_LDLIBS)
$(GPU_FLAGS_STAMP): FORCE
	$(write_flags_stamp)

train_gpt2cp: train_gpt2cp.cu $(CUDA_DEPS) $(GPU_FLAGS_STAMP)
	$(NVCC) $(NVCC_FLAGS) $(call nvcc_pass,$(MPI_COMPILE_FLAGS)) $< -o $@ $(call nvcc_pass,$(MPI_LINK_FLAGS)) $(CUDA_LDLIBS)

# the GPU tests without CMake (scripts/gpu_check.sh); CTest builds the same files
$(BUILD_DIR)/gpu/%: test/%.cu test/lib/gpu_test_utils.cuh test/lib/test_utils.h $(CUDA_DEPS)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -I. $(call nvcc_pass,$(MPI_COMPILE_FLAGS)) $< -o $@ $(call nvcc_pass,$(MPI_LINK_FLAGS)) $(CUDA_LDLIBS)

# SAN=1: the sanitized CPU code and tests in a build dir of their own; the CUDA
# code is left out (the sanitizers check the host code)
TEST_BUILD_DIR = $(BUILD_DIR)/test$(if $(filter 1,$(SAN)),-san)
ifeq ($(SAN),1)
  CMAKE_CUDA_ARGS = -DGPU_TESTS=OFF
  HAVE_NVCC =
endif

# the suite's build and CTest run as many jobs as this machine has cores
NPROC := $(shell nproc 2> /dev/null || echo 2)

test:
	@# every tool a test runs is built here, before CTest: a test that ran make itself
	@# would relink a tool that a test beside it is running (they share the repo root)
	$(MAKE) train_gpt2cp_cpu encode cp_layout loss_mask
	$(if $(HAVE_NVCC),,@echo "note: no nvcc at $(NVCC): train_gpt2cp and the GPU tests are not built (set CUDA_HOME)")
	cmake -S test -B $(TEST_BUILD_DIR) -DCMAKE_BUILD_TYPE=Release -DSAN=$(SAN) -DNO_BLAS=$(NO_BLAS) $(CMAKE_CUDA_ARGS) > /dev/null
	@# the GPU trainer (one nvcc process) builds beside the suite's binaries, so that every core stays busy
	$(if $(HAVE_NVCC),$(MAKE) train_gpt2cp & gpu=$$!;) cmake --build $(TEST_BUILD_DIR) -j $(NPROC); status=$$?; \
		$(if $(HAVE_NVCC),wait $$gpu || status=1;) exit $$status
	@# after CTest's output, each skipped test with its reason (test/lib/skip_summary.py);
	@# make's exit status stays CTest's
	cd $(TEST_BUILD_DIR) && rm -f ctest.xml && ctest --output-on-failure -j $(NPROC) --output-junit ctest.xml $(CTEST_ARGS); \
		status=$$?; python3 $(CURDIR)/test/lib/skip_summary.py ctest.xml; exit $$status

run:
	bash scripts/run_default.sh

# what the one-call GPU check (scripts/gpu_call.sh) carries to a GPU machine: its
# binaries, the CPU twin's references, Open MPI, in gpu_prep/ (GPU_PREP_SIZES=emulation:
# the emulated dry run's)
gpu_prep:
	bash scripts/gpu_prep.sh

# the tools (encode, cp_layout, loss_mask): one process, no MPI; SAN=1 builds them under
# the sanitizers too, and a change of these flags rebuilds them (the suite's SAN=1 run
# passes SAN=1 to the tests, whose `make cp_layout` then builds the sanitized tool)
TOOL_CFLAGS = -O2 -Wall -Wextra -Wno-unused-function -std=gnu11
ifeq ($(SAN),1)
  TOOL_CFLAGS += -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif
TOOL_FLAGS_STAMP = $(BUILD_DIR)/tool_flags
$(TOOL_FLAGS_STAMP): STAMP_FLAGS = $(TOOL_CFLAGS)
$(TOOL_FLAGS_STAMP): FORCE
	$(write_flags_stamp)

# text to llm.c token files: GPT-2's BPE, the pre-tokenizer regex run by PCRE2
encode: encode.c llmc/bpe.h llmc/tokenizer.h llmc/utf8.h llmc/utils.h llmc/tool_outputs.h $(TOOL_FLAGS_STAMP)
	$(CC) $(TOOL_CFLAGS) $< -o $@ -lpcre2-8

# dev tool: which tokens each CP rank owns and its attention work (no MPI needed)
cp_layout: dev/cp_layout.c $(DEPS) $(TOOL_FLAGS_STAMP)
	$(CC) $(TOOL_CFLAGS) -Wno-unknown-pragmas -DNO_BLAS $< -o $@ -lm

# dev tool: the loss mask of a token file for "train only on the answer" data (-lm 1 reads it)
loss_mask: dev/loss_mask.c $(DEPS) $(TOOL_FLAGS_STAMP)
	$(CC) $(TOOL_CFLAGS) $< -o $@

# dev benchmark: per-rank memory, messages and time of each attention algorithm (dev/bench/README.md)
bench_attention: dev/bench/attention_algorithms.c $(DEPS)
	$(MPICC) $(CFLAGS) $< -o $@ $(LDLIBS)

# dev benchmark: the CPU classifier's time against its chunk size (dev/bench/README.md)
bench_classifier: dev/bench/classifier.c $(DEPS)
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# dev benchmark: OpenBLAS's sgemm GFLOP/s, the bar of the CPU trainer's speed (dev/bench/README.md)
bench_sgemm: dev/bench/sgemm_rate.c llmc/utils.h
	$(CC) $(CFLAGS) $< -o $@ $(LDLIBS)

# dev benchmark: ms per block pair of the CPU attention, tiles vs loops (dev/bench/README.md)
bench_attention_cpu: dev/bench/attention_cpu.c $(DEPS) $(CPU_FLAGS_STAMP)
	$(MPICC) $(CFLAGS) $< -o $@ $(LDLIBS)

# dev benchmark: the longest T one GPU fits, from the GPU trainer's memory estimate
# (host code, runs without a GPU; dev/bench/README.md)
bench_long_fit: dev/bench/long_context_fit.cu $(CUDA_DEPS)
	$(NVCC) $(NVCC_FLAGS) -I. $(call nvcc_pass,$(MPI_COMPILE_FLAGS)) $< -o $@ $(call nvcc_pass,$(MPI_LINK_FLAGS)) $(CUDA_LDLIBS)

# dev benchmark: the GPU block attention, forward and backward, on one GPU without MPI
# (dev/bench/README.md, dev/bench/gpu_bench.sh)
bench_attention_gpu: dev/bench/attention_gpu.cu $(CUDA_DEPS)
	$(NVCC) $(NVCC_FLAGS) -I. $< -o $@ -L$(CUDA_HOME)/lib64 -Xlinker -rpath,$(CUDA_HOME)/lib64 -lcublas -lcublasLt

# the GPU check's first step: a context and one tiny kernel (dev/cuda/gpu_probe.cu); the
# runtime linked statically, so it needs nothing but the driver
gpu_probe: dev/cuda/gpu_probe.cu
	$(NVCC) -O2 -arch=sm_$(GPU_ARCH) $< -o $@

clean:
	rm -rf train_gpt2cp_cpu train_gpt2cp encode cp_layout loss_mask bench_attention bench_classifier bench_sgemm bench_attention_cpu bench_long_fit bench_attention_gpu gpu_probe $(BUILD_DIR) gpu_prep
