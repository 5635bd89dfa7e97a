# meshmoe: make (build ./train), make run, make test, make asan, make emu-asan, make tsan, make tsan-mpi, make parity, make bench,
# make sweep, make docs, make hf-check, make fuzz, make mpi (./train_mpi), make gpu, make hip, make gpu-mpi, make hip-mpi, make gpu-carry
CC      ?= gcc
OPT     ?= -O2 -march=native
CFLAGS  ?= $(OPT)
CFLAGS  += -std=c11 -Wall -Wextra -D_GNU_SOURCE -fopenmp -I.
LDLIBS  := -lm

# OpenBLAS: pkg-config, else -lopenblas if it links, else the portable matmul (the
# trainer says so at start-up).
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null)
ifeq ($(BLAS_LIBS),)
  BLAS_LIBS := $(shell echo 'int main(void){return 0;}' | $(CC) -x c - -lopenblas -o /dev/null 2>/dev/null && echo -lopenblas)
endif
ifeq ($(BLAS_LIBS),)
  CFLAGS += -DMESHMOE_NO_BLAS
  $(info meshmoe: OpenBLAS not found, building the portable matmul (install libopenblas-dev for speed))
endif
CFLAGS += $(BLAS_CFLAGS)
LDLIBS += $(BLAS_LIBS)

# BUILD: where objects go (build/, or build/asan for the sanitizer build); OUT: the trainer.
BUILD   ?= build
OUT     ?= train
# Every folder of the library (README.md#layers gives their order).
SRC_DIRS := core kernels kernels/cpu base data model sharding pipeline optim trainer report sweep
# base/net_mpi.c is the MPI transport of ./train_mpi alone (make mpi); ./train has no MPI.
LIB_SRC := $(filter-out base/net_mpi.c,$(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.c)))
HDRS    := $(foreach d,$(SRC_DIRS),$(wildcard $(d)/*.h) $(wildcard $(d)/*.def))
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o)
TESTS   := $(patsubst tests/%.c,build/%,$(wildcard tests/test_*.c)) build/test_gpu_attention

.PHONY: all run test test-builds unit asan tsan emu-asan parity combos hf-check bench bench-gpu bench-peers clean corpus sweep docs plots fuzz mpi tsan-mpi gpu hip gpu-mpi hip-mpi gpu-ref gpu-carry
all: train

$(BUILD)/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# AdamW's loop in vector instructions needs sqrtf without its errno branch (the same bits:
# the square root is exactly rounded either way; kernels/cpu/optim.c).
$(BUILD)/kernels/cpu/optim.o: CFLAGS += -fno-math-errno
# The planner's kernels take the CPU kernels' arguments and use none of them (kernels/dry.c).
$(BUILD)/kernels/dry.o: CFLAGS += -Wno-unused-parameter

train: $(BUILD)/train.o $(LIB_OBJ)
	$(CC) $(CFLAGS) $^ -o $(OUT) $(LDLIBS)

# build/plant/train: ./train with the strict mode's planted host accesses (tests/strict.sh):
# the two files that hold them built again with MESHMOE_PLANT_HOST_ACCESS, the rest shared.
PLANTED := model/rmsnorm.c base/collectives.c
build/plant/train: $(BUILD)/train.o $(filter-out $(PLANTED:%.c=$(BUILD)/%.o),$(LIB_OBJ)) $(PLANTED:%.c=build/plant/%.o)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
build/plant/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMESHMOE_PLANT_HOST_ACCESS -c $< -o $@

# ./train_mpi: the trainer as one process of an mpirun job, one process per slice of the
# mesh (docs/mpi.md). The library's objects are ./train's; train.c is built again with the
# MPI start-up, the MPI transport (base/net_mpi.c) added, and mpicc links them with MPI.
MPICC ?= mpicc
mpi: train_mpi build/train_emu_mpi
train_mpi: $(BUILD)/mpi/train.o $(BUILD)/mpi/net_mpi.o $(LIB_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/mpi/train.o: train.c $(HDRS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -DMESHMOE_MPI -c $< -o $@
$(BUILD)/mpi/net_mpi.o: base/net_mpi.c $(HDRS)
	@mkdir -p $(dir $@)
	$(MPICC) $(CFLAGS) -c $< -o $@

build/test_%: tests/test_%.c $(LIB_OBJ) tests/test.h tests/gradcheck.h
	$(CC) $(CFLAGS) $< $(LIB_OBJ) -o $@ $(LDLIBS)
build/test_attn_tiles build/port/test_attn_tiles: tests/attn_cases.h   # (shared with test_gpu_attention)

# The default corpus needs no download: the project's own README and C sources.
build/corpus.txt: $(wildcard README.md *.c $(foreach d,$(SRC_DIRS),$(d)/*.[ch]))
	@mkdir -p build
	cat $^ > $@

corpus: build/corpus.txt

run: train build/corpus.txt
	./train configs/mixtral-tiny.yml dataset_path=build/corpus.txt save_checkpoint=build/run.safetensors

unit: $(TESTS)
	@for t in $(TESTS); do echo "== $$t"; ./$$t || exit 1; done

# Everything: unit tests, end-to-end tests, the sanitizer run, and the JAX parity cases
# (skipped with a reason when Python packages cannot be had), by tests/run_all.sh. What the
# tests run is built first (make test-builds), on every core (TEST_JOBS), whether or not
# make itself was given -j; so are the sanitizer, fuzzing and MPI builds that parts of the
# run make. The parts then run two at a time (tests/run_all.sh says which and why).
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
TEST_BUILDS := train $(TESTS) build/conformance_emu build/emu-asan/conformance_emu build/train_emu build/plant/train \
               build/peak
test:
	bash tests/run_all.sh
test-builds:
	$(MAKE) -j$(TEST_JOBS) $(TEST_BUILDS)

# AddressSanitizer + UBSan build of the trainer, running a short training.
SAN := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
asan:
	$(MAKE) -s -j$(TEST_JOBS) train BUILD=build/asan OUT=build/asan/train OPT="$(SAN)"
	bash tests/asan_run.sh build/asan/train

# ThreadSanitizer build of the trainer (the devices are threads), running 2 steps on
# 8-device meshes (tests/tsan_run.sh says why with one OpenMP thread per device).
TSAN := -O2 -march=native -g -fsanitize=thread
tsan:
	$(MAKE) -s -j$(TEST_JOBS) train BUILD=build/tsan OUT=build/tsan/train OPT="$(TSAN)"
	bash tests/tsan_run.sh build/tsan/train
# The same over processes: ./train_mpi from make tsan's objects, linked by mpicc, 2 steps
# over 2 and 4 processes (tests/tsan_mpi.sh says how OpenMPI's own threads are left out).
tsan-mpi:
	$(MAKE) -s -j$(TEST_JOBS) build/tsan/train_mpi BUILD=build/tsan OPT="$(TSAN)"
	bash tests/tsan_mpi.sh build/tsan/train_mpi
# (made with BUILD=build/tsan, as tsan-mpi does, so that its objects are the sanitizer's)
build/tsan/train_mpi: $(BUILD)/mpi/train.o $(BUILD)/mpi/net_mpi.o $(LIB_OBJ)
	$(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# libFuzzer harnesses (tests/fuzz/) for the preset parser and overrides, the config JSON of
# checkpoints, token files, safetensors headers and a Hugging Face directory's tensors
# (load_hf), built with clang, ASan and UBSan; each
# runs FUZZ_SECONDS from its committed seeds (tests/fuzz/run.sh). The library is built
# without OpenMP and BLAS: the parsers use neither.
FUZZ_SECONDS ?= 60
FUZZ_CFLAGS := -O1 -g -std=c11 -D_GNU_SOURCE -I. -DMESHMOE_NO_BLAS -Wno-unknown-pragmas \
               -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_OBJ    := $(LIB_SRC:%.c=build/fuzz/%.o)
FUZZERS     := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
.SECONDARY: $(FUZZ_OBJ)   # kept between runs (make would delete them as intermediates)
build/fuzz/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -c $< -o $@
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_OBJ)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_OBJ) -o $@ -lm -lpthread
fuzz:
	$(MAKE) -s -j$(TEST_JOBS) $(FUZZERS)
	bash tests/fuzz/run.sh $(FUZZ_SECONDS)

parity: train
	bash tests/parity/run_parity.sh

# Random combinations of model options, meshes and bit-keeping switches (tests/combos.py):
# bits against one device, resumes across meshes, the planner against the measured step.
# make test runs 10 a mode; this, COMBOS_N a mode from COMBOS_SEED. Two more modes run alone:
# --mode gpu (device=gpu against ./train) and --mode mpi (./train_mpi over 2 processes).
COMBOS_N ?= 100
COMBOS_SEED ?= 1
combos: train
	python3 tests/combos.py --n $(COMBOS_N) --seed $(COMBOS_SEED)

# Export both tiny presets to Hugging Face transformers and compare its logits and expert
# choices with meshmoe's (creates .venv-hf with torch and transformers on first use).
hf-check: train
	bash tests/hf/check.sh

bench: train build/gemm_bench build/peak
	bash tests/bench.sh

# make bench-gpu: on a GPU machine, with ./train_gpu built (make gpu) and carried: meshmoe,
# PyTorch and JAX on the -medium presets, one table (tests/gpu_bench.sh, tests/bench_gpu.py).
bench-gpu:
	bash tests/gpu_bench.sh build/bench-gpu

# The peers of make bench in .venv-peers (git-ignored): the pinned JAX stack of the parity
# tests and the pinned torch and transformers of the Hugging Face check. PyPI's Linux torch
# wheel is the CUDA build (about 0.5 GB, 6 GB with the CUDA libraries it imports); a
# CPU-only wheel is not on PyPI.
bench-peers:
	test -x .venv-peers/bin/python || python3 -m venv .venv-peers
	.venv-peers/bin/pip install --quiet -r tests/parity/requirements.txt -r tests/hf/requirements.txt

# Every optimization of docs/optimizations.md toggled against the baseline on both tiny presets:
# losses compared bit for bit, per-device memory measured (sweep/sweep.c). Fails if a "bit"
# row is not bit-identical.
sweep: train
	./train sweep configs/mixtral-tiny.yml
	./train sweep configs/deepseek-tiny.yml

# Regenerates the measured tables and the figures (docs/figures/*.svg) of docs/ from real
# runs (docs/generate.sh; progress on stderr). DOCS_PARTS=figures redraws the figures alone.
docs: train
	bash docs/generate.sh

# The memory timeline of one step of mixtral-tiny on fsdp=2, one SVG per device in build/plots/.
plots: train
	@mkdir -p build/plots
	./train configs/mixtral-tiny.yml ici_fsdp_parallelism=2 per_device_batch_size=4 steps=1 eval_steps=1 \
	    sample_length=0 memory_trace=build/plots/mixtral-tiny-fsdp2.csv
	./train plot build/plots/mixtral-tiny-fsdp2.csv build/plots

clean:
	rm -rf build train train_mpi train_gpu train_hip train_gpu_mpi train_hip_mpi

# GFLOP/s of OpenBLAS's sgemm (the machine's peak) and of the ordered GEMM (tests/bench.sh).
build/gemm_bench: tests/gemm_bench.c $(LIB_OBJ)
	$(CC) $(CFLAGS) $< $(LIB_OBJ) -o $@ $(LDLIBS)

# The machine's limits: fused multiply-adds on registers at each vector width the CPU runs,
# and the memory bandwidth (tests/peak.c; intrinsics chosen at run time, so plain flags).
build/peak: tests/peak.c
	@mkdir -p build
	$(CC) -O2 -std=c11 -Wall -Wextra -fopenmp $< -o $@

# The attention core's forward + backward at the -small presets' shapes, tiles against the
# per-row loops (tests/attn_bench.c).
build/attn_bench: tests/attn_bench.c $(LIB_OBJ)
	$(CC) $(CFLAGS) $< $(LIB_OBJ) -o $@ $(LDLIBS)

# ---- The GPU backend (gpu/, docs/gpu.md): never part of `make` or `make train`. ----
# `make gpu`: the CUDA objects (nvcc, machine code for sm_80 and sm_90 plus sm_90's PTX, which
# a newer GPU compiles at load time) in build/gpu/, and build/conformance_gpu, the
# conformance test (tests/test_conformance.c) comparing the CUDA backend with the CPU's.
# `make hip`: the same sources with hipcc for gfx90a and gfx940, into build/hip/ and
# build/conformance_hip. --fmad=false / -ffp-contract=off: the compiler may not fuse a
# multiply and an add that the source keeps apart (the CPU build, -std=c11, does not either);
# an FMA is written as fmaf where the CPU kernel has one. Division and square root stay
# IEEE (neither compiler's default relaxes them; no fast-math).
# hipcc's GPU pass does not emit the family tables (gpu/gpu.h: GPU_HOST_PASS), so it would call
# their host wrappers unused: -Wno-unused-function for that pass only.
# The binaries are meant to be carried to a GPU machine (tests/gpu.sh): the CUDA runtime
# is linked statically, the CPU oracle is built for any x86-64 without OpenMP or OpenBLAS,
# and cuBLAS is loaded only when chosen (gpu/matmul.cu).
NVCC      ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
HIPCC     ?= hipcc
GPU_SRC   := $(wildcard gpu/*.cu)
GPU_HDRS  := $(wildcard gpu/*.h) $(wildcard kernels/*.h)
# The kernels' code compressed in the binary (--compress-mode=size, nvcc 12.8 and later; read by the
# driver that the CUDA 13 runtime needs anyway, 580 or later): 5-6 times fewer bytes of device code,
# so that the binaries a GPU session carries fit its 64 MiB with room (docs/gpu-session.md).
NVCOMPRESS = $(shell $(NVCC) --help 2>/dev/null | grep -q -- --compress-mode && echo --compress-mode=size)
# -Xptxas -v: each object's log (%.o.log) holds every kernel's registers, stack frame and spills,
# which tests/gpu_build.sh checks against tests/gpu_spills.txt (tests/ptxas_report.py).
NVFLAGS   := -O2 -std=c++17 --fmad=false -I. -Xcompiler -Wall,-Wextra -Xptxas -v \
             -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90 $(NVCOMPRESS)
HIPFLAGS  := -O2 -std=c++17 -ffp-contract=off -I. -Wall -Wextra --offload-arch=gfx90a --offload-arch=gfx940 \
             -Xarch_device -Wno-unused-function
# The CPU backend as the oracle, built portably (no -march=native: the binary runs on the GPU
# machine's CPU; the ordered GEMM picks its kernel at run time and gives the same bits).
ORACLE_SRC    := $(wildcard core/*.c) kernels/backend.c $(wildcard kernels/cpu/*.c)
# Without OpenMP its pragmas are ignored (-Wno-unknown-pragmas) and a parameter that only an
# OpenMP clause reads goes unused (-Wno-unused-parameter: kernels/cpu/gemm.c's `par`).
ORACLE_CFLAGS := -O2 -std=c11 -Wall -Wextra -Wno-unknown-pragmas -Wno-unused-parameter -D_GNU_SOURCE -I. \
                 -DMESHMOE_NO_BLAS
.SECONDARY: $(GPU_SRC:gpu/%.cu=build/gpu/%.o) $(GPU_SRC:gpu/%.cu=build/hip/%.o)

# Each object keeps its compiler's messages beside it (%.o.log, shown as well): tests/gpu_build.sh
# counts the warnings of every object, also of those not recompiled this time.
KEEP_LOG = > $@.log 2>&1 || { cat $@.log; exit 1; }; cat $@.log
build/gpu/%.o: gpu/%.cu $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@ $(KEEP_LOG)
# cuDNN's fused flash attention (gpu/attn_cudnn.cu, gpu_attention=cudnn) is written against
# cuDNN's frontend, a header-only C++ library that PyPI ships in the wheel nvidia-cudnn-frontend
# (pinned here; its headers only, into build/cudnn_frontend/include). Where pip cannot fetch it,
# the object is built without cuDNN and gpu_attention=cudnn says so at start-up. -isystem: the
# library's own warnings are not the project's (tests/gpu_build.sh counts the project's).
CUDNN_FE_VERSION := 1.32.0
CUDNN_FE         := build/cudnn_frontend
$(CUDNN_FE)/fetched:
	@mkdir -p $(CUDNN_FE)
	@python3 -m pip download -q --no-deps --only-binary=:all: -d $(CUDNN_FE)/wheel \
	    nvidia-cudnn-frontend==$(CUDNN_FE_VERSION) && python3 tests/wheel_headers.py $(CUDNN_FE)/wheel $(CUDNN_FE) \
	    || echo "make: cuDNN's frontend headers could not be fetched: gpu_attention=cudnn is left out of this build"
	@touch $@
# (the frontend's headers include cuDNN's own, <cudnn.h>: without them too, no cuDNN either)
build/gpu/attn_cudnn.o: gpu/attn_cudnn.cu $(GPU_HDRS) $(CUDNN_FE)/fetched
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $$(test -f $(CUDNN_FE)/include/cudnn_frontend.h && echo '#include <cudnn.h>' | \
	    $(NVCC) -E -x cu - > /dev/null 2>&1 && echo -DMESHMOE_CUDNN -isystem $(CUDNN_FE)/include) -c $< -o $@ $(KEEP_LOG)
build/hip/%.o: gpu/%.cu $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(HIPCC) -x hip $(HIPFLAGS) -c $< -o $@ $(KEEP_LOG)
build/oracle/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(ORACLE_CFLAGS) -c $< -o $@ $(KEEP_LOG)

ORACLE_OBJ := $(ORACLE_SRC:%.c=build/oracle/%.o)
# The conformance test's sources (tests/conformance.h): the CPU build is part of `make test`;
# the GPU builds compile them with -DMESHMOE_CONFORMANCE_GPU (the CUDA or HIP backend under test).
CONF_SRC := tests/test_conformance.c tests/conformance.c $(wildcard tests/conformance_*.c)
build/test_conformance: $(CONF_SRC) tests/conformance.h $(LIB_OBJ)
	$(CC) $(CFLAGS) $(CONF_SRC) $(LIB_OBJ) -o $@ $(LDLIBS)
CONF_GPU_CC = $(CC) $(ORACLE_CFLAGS) -DMESHMOE_CONFORMANCE_GPU -c $< -o $@ $(KEEP_LOG)
build/gpu/tests/%.o: tests/%.c tests/conformance.h gpu/backend.h $(HDRS)
	@mkdir -p $(dir $@)
	$(CONF_GPU_CC)
build/hip/tests/%.o: tests/%.c tests/conformance.h gpu/backend.h $(HDRS)
	@mkdir -p $(dir $@)
	$(CONF_GPU_CC)
build/conformance_gpu: $(CONF_SRC:%.c=build/gpu/%.o) $(GPU_SRC:gpu/%.cu=build/gpu/%.o) $(ORACLE_OBJ)
	$(NVCC) -cudart static -Xcompiler -static-libstdc++,-static-libgcc $^ -o $@ -ldl -lm
# build/products_gpu (tests/products_gpu.c): the products with float32 operands against the
# same on bf16 storage, timed on the GPU; tests/gpu_bench.sh runs it. build/products_emu: the
# same program on the emulation (tests/gpu_emu.sh runs its small shapes).
build/products_gpu: build/gpu/tests/products_gpu.o $(GPU_SRC:gpu/%.cu=build/gpu/%.o) $(ORACLE_OBJ)
	$(NVCC) -cudart static -Xcompiler -static-libstdc++,-static-libgcc $^ -o $@ -ldl -lm
build/conformance_hip: $(CONF_SRC:%.c=build/hip/%.o) $(GPU_SRC:gpu/%.cu=build/hip/%.o) $(ORACLE_OBJ)
	$(HIPCC) --offload-arch=gfx90a --offload-arch=gfx940 $^ -o $@ -lm

# build/conformance_emu (part of `make test`; no GPU, no nvcc): the conformance test against
# the GPU backend's sources as they are, compiled by g++ against gpu/emu.h, a CPU
# emulation of the CUDA they use (docs/gpu.md): every kernel family's logic checked where no
# GPU is; build/emu-asan/ the same under AddressSanitizer and UBSan. -mfma: the kernels'
# fmaf as one instruction, where it is a library call without (the same result: both round once).
EMU_CXXFLAGS := -std=c++17 -ffp-contract=off -mfma -Wall -Wextra -Wno-unknown-pragmas -D_GNU_SOURCE -DGPU_EMULATE -I.
EMU_OBJ      := $(GPU_SRC:gpu/%.cu=build/emu/%.o)
build/emu/%.o: gpu/%.cu $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) -O2 $(EMU_CXXFLAGS) -x c++ -c $< -o $@
build/emu-asan/%.o: gpu/%.cu $(GPU_HDRS)
	@mkdir -p $(dir $@)
	$(CXX) $(SAN) $(EMU_CXXFLAGS) -x c++ -c $< -o $@
build/emu/tests/%.o: tests/%.c tests/conformance.h gpu/backend.h $(HDRS)
	@mkdir -p $(dir $@)
	$(CONF_GPU_CC)
build/conformance_emu: $(CONF_SRC:%.c=build/emu/%.o) $(EMU_OBJ) $(ORACLE_OBJ)
	$(CXX) $^ -o $@ -lm -ldl -lpthread
build/products_emu: build/emu/tests/products_gpu.o $(EMU_OBJ) $(ORACLE_OBJ)
	$(CXX) $^ -o $@ -lm -ldl -lpthread
build/emu-asan/conformance_emu: $(CONF_SRC:%.c=build/emu/%.o) $(EMU_OBJ:build/emu/%=build/emu-asan/%) \
                                $(ORACLE_OBJ)
	$(CXX) $(SAN) $^ -o $@ -lm -ldl -lpthread

# build/train_emu (part of `make test`; no GPU, no nvcc): the whole trainer with the GPU
# backend's sources compiled against gpu/emu.h in place of kernels/no_gpu.c, so that
# device=gpu runs every layer, mesh and collective through the GPU's kernels on the CPU
# (tests/gpu_emu.sh compares its runs with ./train's, bit for bit).
build/train_emu: $(BUILD)/train.o $(filter-out $(BUILD)/kernels/no_gpu.o,$(LIB_OBJ)) $(EMU_OBJ)
	$(CXX) -fopenmp $^ -o $@ $(LDLIBS)
# build/emu-asan/train_emu: the same under AddressSanitizer and UBSan, its C objects those of
# `make asan` (tests/gpu_emu.sh runs a few of its runs so). Made by `make emu-asan`.
build/emu-asan/train_emu: $(BUILD)/train.o $(filter-out $(BUILD)/kernels/no_gpu.o,$(LIB_OBJ)) \
                          $(EMU_OBJ:build/emu/%=build/emu-asan/%)
	$(CXX) $(SAN) -fopenmp $^ -o $@ $(LDLIBS)
emu-asan:
	$(MAKE) -s -j$(TEST_JOBS) build/emu-asan/train_emu BUILD=build/asan OPT="$(SAN)"
# build/train_emu_mpi (tests/mpi.sh): ./train_mpi with the emulated GPU backend of
# build/train_emu, so that device=gpu over processes runs here: the devices' buffers staged
# through host memory between processes as a GPU's are (base/span.c).
build/train_emu_mpi: $(BUILD)/mpi/train.o $(BUILD)/mpi/net_mpi.o $(filter-out $(BUILD)/kernels/no_gpu.o,$(LIB_OBJ)) \
                     $(EMU_OBJ)
	$(MPICC) -fopenmp $^ -o $@ $(LDLIBS) -lstdc++

# build/test_gpu_attention (part of `make test`, no GPU needed): the GPU's attention kernels,
# gpu/attention.cu and gpu/attn_tiles.cu as they are, compiled by g++ against a CPU emulation
# of the CUDA they use (gpu/emu.h), compared with each other and with the CPU's loops.
# -ffp-contract=off: as the GPU builds, no multiply and add fused that the source keeps apart.
EMU_SRC := gpu/attention.cu gpu/attn_tiles.cu gpu/attn_mma.cu gpu/attn_mma_bwd.cu gpu/attn_cudnn.cu
build/test_gpu_attention: tests/test_gpu_attention.cpp gpu/emu.h tests/attn_cases.h tests/test.h $(EMU_SRC) gpu/gpu.h \
                          gpu/attention.h gpu/attn_mma.h gpu/backend.h $(LIB_OBJ)
	$(CXX) $(OPT) -std=c++17 -ffp-contract=off -Wall -Wextra -Wno-unknown-pragmas -D_GNU_SOURCE -DGPU_EMULATE \
	    -fopenmp -I. -x c++ $(EMU_SRC) -x none $< $(LIB_OBJ) -o $@ $(LDLIBS)
# The same under AddressSanitizer and UBSan (the kernels' sources only): a read or write past
# a shared-memory layout or an array is reported (`--quick`: a fifth of the cases).
build/asan/test_gpu_attention: tests/test_gpu_attention.cpp gpu/emu.h tests/attn_cases.h tests/test.h \
                               $(EMU_SRC) gpu/gpu.h gpu/attention.h gpu/attn_mma.h gpu/backend.h $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) -O1 -g $(SAN) -std=c++17 -ffp-contract=off -Wall -Wextra -Wno-unknown-pragmas -D_GNU_SOURCE \
	    -DGPU_EMULATE -fopenmp -I. -x c++ $(EMU_SRC) -x none $< $(LIB_OBJ) -o $@ $(LDLIBS)

# ./train_gpu and ./train_hip: the whole trainer (the same C sources as ./train) with the GPU
# backend linked in; device=gpu chooses it (train.c, backend_gpu), the CPU backend stays the
# default. gpu/select.cu takes the place of kernels/no_gpu.c (./train's "no GPU here").
# The C objects are built for the machine the binary is carried to, which may lack AVX-512
# and OpenBLAS: x86-64-v3 (AVX2 and FMA; the ordered GEMM still picks AVX-512 at run time
# where there is one, and every kernel gives the same bits on either: docs/gpu.md), no
# OpenBLAS (the default matmul_impl=ordered does not use it), libgomp linked in statically;
# ./train_gpu also libstdc++, libgcc and the CUDA runtime, so it needs only libc, libm and the
# driver (./train_hip needs ROCm's shared libraries, as any HIP program does).
PORT_CFLAGS := -O2 -march=x86-64-v3 -std=c11 -Wall -Wextra -D_GNU_SOURCE -fopenmp -I. -DMESHMOE_NO_BLAS
PORT_OBJ    := $(patsubst %.c,build/port/%.o,$(filter-out kernels/no_gpu.c,$(LIB_SRC)) train.c)
build/port/%.o: %.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(PORT_CFLAGS) -c $< -o $@ $(KEEP_LOG)
build/port/kernels/cpu/optim.o: PORT_CFLAGS += -fno-math-errno
build/port/kernels/dry.o: PORT_CFLAGS += -Wno-unused-parameter
STATIC_GOMP := $(shell $(CC) -print-file-name=libgomp.a) -lpthread   # the archive by its path: no libgomp.so needed
train_gpu: $(PORT_OBJ) $(GPU_SRC:gpu/%.cu=build/gpu/%.o)
	$(NVCC) -cudart static -Xcompiler -static-libstdc++,-static-libgcc $^ -o $@ \
	    $(STATIC_GOMP) -ldl -lm
train_hip: $(PORT_OBJ) $(GPU_SRC:gpu/%.cu=build/hip/%.o)
	$(HIPCC) --offload-arch=gfx90a --offload-arch=gfx940 $^ -o $@ $(STATIC_GOMP) -lm

# The same objects with the CPU backend alone: the trainer as any AVX2 machine without
# OpenBLAS builds it (tests/portable.sh compares its bits with ./train's).
build/port/train: $(PORT_OBJ) build/port/kernels/no_gpu.o
	$(CC) $(PORT_CFLAGS) $^ -o $@ -lm
# The unit tests of the vector kernels, built the same way (tests/portable.sh runs them).
build/port/test_%: tests/test_%.c $(filter-out build/port/train.o,$(PORT_OBJ)) build/port/kernels/no_gpu.o tests/test.h
	$(CC) $(PORT_CFLAGS) $< $(filter %.o,$^) -o $@ -lm

gpu: build/conformance_gpu train_gpu build/products_gpu
hip: build/conformance_hip train_hip

# ./train_gpu_mpi and ./train_hip_mpi: the GPU trainers as processes of an mpirun job, each
# with its slice of the mesh on its GPUs (docs/mpi.md#gpus-over-processes): ./train_gpu's
# objects with train.c's MPI start-up and the MPI transport, linked with the MPI library
# (mpicc --showme:link, OpenMPI's). MPI moves host bytes; the devices' pieces are staged
# through host memory by the backend (base/span.c), so any MPI will do, CUDA-aware or not.
MPI_LINK = $(shell $(MPICC) --showme:link 2>/dev/null)
PORT_MPI_OBJ = $(filter-out build/port/train.o,$(PORT_OBJ)) build/port/mpi/train.o build/port/mpi/net_mpi.o
build/port/mpi/train.o: train.c $(HDRS)
	@mkdir -p $(dir $@)
	$(MPICC) $(PORT_CFLAGS) -DMESHMOE_MPI -c $< -o $@ $(KEEP_LOG)
build/port/mpi/net_mpi.o: base/net_mpi.c $(HDRS)
	@mkdir -p $(dir $@)
	$(MPICC) $(PORT_CFLAGS) -c $< -o $@ $(KEEP_LOG)
train_gpu_mpi: $(PORT_MPI_OBJ) $(GPU_SRC:gpu/%.cu=build/gpu/%.o)
	$(NVCC) -cudart static -Xcompiler -static-libstdc++,-static-libgcc $^ -o $@ $(STATIC_GOMP) -ldl -lm $(MPI_LINK)
train_hip_mpi: $(PORT_MPI_OBJ) $(GPU_SRC:gpu/%.cu=build/hip/%.o)
	$(HIPCC) --offload-arch=gfx90a --offload-arch=gfx940 $^ -o $@ $(STATIC_GOMP) -lm $(MPI_LINK)
gpu-mpi: train_gpu_mpi
hip-mpi: train_hip_mpi

# What a GPU session carries (docs/gpu.md#a-gpu-session): ./train_gpu, build/conformance_gpu
# and the CPU's references for tests/gpu.sh, made by this machine's ./train (tests/gpu_ref.sh).
gpu-ref: train
	bash tests/gpu_ref.sh build/gpu_ref
# (./train_gpu_mpi too where OpenMPI's mpicc is: tests/gpu.sh runs it where the GPU machine has MPI.)
gpu-carry: gpu gpu-ref $(if $(shell command -v $(MPICC) 2>/dev/null),train_gpu_mpi)
	@du -ch train_gpu build/conformance_gpu build/products_gpu build/gpu_ref $(wildcard train_gpu_mpi) | sed 's/^/carry: /'

