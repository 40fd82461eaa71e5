# gpt2cp: context-parallel GPT-2 training in C and CUDA.
#
#   make train_gpt2cp_cpu   the CPU twin (MPI + OpenMP, OpenBLAS when found)
#   make train_gpt2cp       the GPU trainer (CUDA + cuBLAS + NCCL + MPI)
#   make test               installs what is missing, builds, runs the CTest suite
#   make run                installs what is missing, builds, trains the embedded default
#
# Options: NO_BLAS=1 (plain C matmuls), NO_OMP=1, SAN=1 (AddressSanitizer and
# UndefinedBehaviorSanitizer on the CPU code), CUDA_HOME=/usr/local/cuda.

MPICC ?= mpicc
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
BUILD_DIR ?= build

CFLAGS = -O3 -march=native -Wall -Wextra -Wno-unused-function -std=gnu11
LDLIBS = -lm
DEPS = $(wildcard cp/*.h llmc/*.h) train_common.h

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
    $(info no OpenBLAS found: building the plain C matmuls (apt-get install libopenblas-openmp-dev for speed))
  endif
endif

ifeq ($(SAN),1)
  CFLAGS += -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
endif

.PHONY: all test run clean

all: train_gpt2cp_cpu

train_gpt2cp_cpu: train_gpt2cp_cpu.c $(DEPS)
	$(MPICC) $(CFLAGS) $< -o $@ $(LDLIBS)

test:
	bash scripts/install_deps.sh
	$(MAKE) train_gpt2cp_cpu
	cmake -S test -B $(BUILD_DIR)/test -DCMAKE_BUILD_TYPE=Release -DSAN=$(SAN) -DNO_BLAS=$(NO_BLAS) > /dev/null
	cmake --build $(BUILD_DIR)/test -j 2
	cd $(BUILD_DIR)/test && ctest --output-on-failure -j 2

run:
	bash scripts/run_default.sh

# dev tool: which tokens each CP rank owns and its attention work (no MPI needed)
cp_layout: dev/cp_layout.c $(DEPS)
	$(CC) -O2 -Wall -Wextra -Wno-unused-function -Wno-unknown-pragmas -std=c11 $< -o $@ -lm

clean:
	rm -rf train_gpt2cp_cpu train_gpt2cp cp_layout $(BUILD_DIR)
