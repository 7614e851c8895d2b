# flashattn.h build: `make run` and `make test` are all a fresh Debian machine needs.
CC      ?= cc
CXX     ?= c++
NVCC    ?= nvcc
BUILD   := build
WARN    := -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g
CSTD    := -std=c99 -pedantic
LDLIBS  := -lopenblas -lm -lpthread
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

EXAMPLES := quickstart naive_vs_tiled split_keys

.PHONY: all deps run test bench test-cuda bench-cuda bench-cuda-build clean

all: deps $(addprefix $(BUILD)/,$(EXAMPLES)) $(BUILD)/bench

# ---- dependencies: Debian's libopenblas-dev and libcmocka-dev ----------------------------------
# Installed with apt-get when missing and we are root; otherwise deps stops and prints the exact
# command. Without dpkg (not Debian), a one-line compile and link against both libraries decides.
# Optional: clang and its runtimes (libFuzzer, sanitizers) for the fuzzer (make fuzz; make test runs
# it for a minute when they are there): installed too when root, else a note; never an error.
DEPS_PKGS := libopenblas-dev libcmocka-dev
DEPS_OPT_PKGS := clang libclang-rt-dev
deps:
	@if command -v dpkg-query >/dev/null 2>&1; then \
	  opt=""; \
	  for pkg in $(DEPS_OPT_PKGS); do \
	    dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || opt="$$opt $$pkg"; \
	  done; \
	  if [ -n "$$opt" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "deps: installing$$opt (optional: the fuzzer) with apt-get"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$opt >/dev/null; } || \
	      echo "deps: note: apt-get could not install$$opt; make fuzz will be skipped"; \
	  elif [ -n "$$opt" ]; then \
	    echo "deps: note: optional$$opt not installed (the fuzzer): sudo apt-get install -y$$opt"; \
	  fi; \
	fi
	@missing=""; \
	if command -v dpkg-query >/dev/null 2>&1; then \
	  for pkg in $(DEPS_PKGS); do \
	    dpkg-query -W -f='$${Status}' $$pkg 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$pkg"; \
	  done; \
	else \
	  printf '#include <cblas.h>\n#include <stdarg.h>\n#include <stddef.h>\n#include <setjmp.h>\n#include <stdint.h>\n#include <cmocka.h>\nint main(void){return 0;}\n' \
	    | $(CC) -x c - -o /dev/null -lopenblas -lcmocka 2>/dev/null || { \
	    echo "deps: OpenBLAS and cmocka (headers and libraries) are needed and were not found;"; \
	    echo "deps: install them with your package manager (Debian: apt-get install -y $(DEPS_PKGS))"; exit 1; }; \
	fi; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "deps: installing$$missing with apt-get"; \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq$$missing >/dev/null; } || { \
	      echo "deps: apt-get failed; run this, then make again:"; echo "    apt-get install -y$$missing"; exit 1; }; \
	  else \
	    echo "deps: missing$$missing; run this, then make again:"; echo "    sudo apt-get install -y$$missing"; exit 1; \
	  fi; \
	fi

$(BUILD):
	@mkdir -p $(BUILD)

# ---- examples ----------------------------------------------------------------------------------
$(BUILD)/%: examples/%.c flashattn.h | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -I. $< -o $@ $(LDLIBS)

# the two quick examples, then the article's experiments (about half a minute on 2 cores)
run: deps $(addprefix $(BUILD)/,$(EXAMPLES))
	./$(BUILD)/quickstart
	./$(BUILD)/split_keys
	./$(BUILD)/naive_vs_tiled

# ---- bench -------------------------------------------------------------------------------------
# Built as a user would build it: plain -O2, no -march (the SIMD path is picked at run time).
# `make bench BENCH_ARGS=--csv` (or --quick, --threads N, --max-s N, --naive-mem GiB, --pool,
# --no-row-sgemm, --no-naive, --no-scaling, --few-reps); about 5 min.
BENCH_ARGS ?=
$(BUILD)/bench: bench/bench.c flashattn.h | $(BUILD)
	$(CC) -O2 -g $(CSTD) $(WARN) -I. $< -o $@ $(LDLIBS)

bench: deps $(BUILD)/bench
	./$(BUILD)/bench $(BENCH_ARGS)

# ---- tests -------------------------------------------------------------------------------------
# One suite, four builds: plain (OpenBLAS, the best SIMD path of this CPU), FLASHATTN_NO_BLAS with
# the portable C kernels (FLASHATTN_ISA=0), the AVX2 kernels (FLASHATTN_ISA=1, where the CPU has
# AVX-512), and ASan+UBSan. Each takes seconds.
TEST_SRC  := tests/test_flashattn.c
TEST_DEPS := $(TEST_SRC) tests/ref.h tests/talloc.h flashattn.h
TEST_LIBS := -lcmocka $(LDLIBS)
SAN_ENV   := ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1
CLANG     ?= $(shell command -v clang 2>/dev/null)

$(BUILD)/test_flashattn: $(TEST_DEPS) | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -I. $< -o $@ $(TEST_LIBS)

$(BUILD)/test_flashattn_san: $(TEST_DEPS) | $(BUILD)
	$(CC) -O1 -g $(SAN) $(CSTD) $(WARN) -I. $< -o $@ $(TEST_LIBS)

$(BUILD)/test_flashattn_noblas: $(TEST_DEPS) | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -DFLASHATTN_NO_BLAS -DFLASHATTN_ISA=0 -I. $< -o $@ -lcmocka -lm -lpthread

$(BUILD)/test_flashattn_avx2: $(TEST_DEPS) | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -DFLASHATTN_ISA=1 -I. $< -o $@ $(TEST_LIBS)

# the backward's suite, in the same four builds
BWD_SRC  := tests/test_backward.c
BWD_DEPS := $(BWD_SRC) tests/ref.h tests/talloc.h flashattn.h

$(BUILD)/test_backward: $(BWD_DEPS) | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -I. $< -o $@ $(TEST_LIBS)

$(BUILD)/test_backward_san: $(BWD_DEPS) | $(BUILD)
	$(CC) -O1 -g $(SAN) $(CSTD) $(WARN) -I. $< -o $@ $(TEST_LIBS)

$(BUILD)/test_backward_noblas: $(BWD_DEPS) | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -DFLASHATTN_NO_BLAS -DFLASHATTN_ISA=0 -I. $< -o $@ -lcmocka -lm -lpthread

$(BUILD)/test_backward_avx2: $(BWD_DEPS) | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -DFLASHATTN_ISA=1 -I. $< -o $@ $(TEST_LIBS)

test: deps test-compile $(addprefix $(BUILD)/,$(EXAMPLES)) $(BUILD)/bench \
      $(BUILD)/test_flashattn $(BUILD)/test_flashattn_san $(BUILD)/test_flashattn_noblas \
      $(BUILD)/test_flashattn_avx2 $(BUILD)/test_backward $(BUILD)/test_backward_san \
      $(BUILD)/test_backward_noblas $(BUILD)/test_backward_avx2 test-cuda-compile
	./$(BUILD)/test_flashattn
	./$(BUILD)/test_flashattn_noblas
	./$(BUILD)/test_flashattn_avx2
	$(SAN_ENV) ./$(BUILD)/test_flashattn_san
	./$(BUILD)/test_backward
	./$(BUILD)/test_backward_noblas
	./$(BUILD)/test_backward_avx2
	$(SAN_ENV) ./$(BUILD)/test_backward_san
	@$(MAKE) --no-print-directory test-fuzz

# ---- the fuzzer (tests/fuzz_params.c: libFuzzer with ASan and UBSan; clang and its runtime) ------
# make fuzz runs it for FUZZ_TIME seconds (0: until stopped) on build/fuzz_corpus, which grows from
# run to run; a failing input is written to build/crash-*. make test runs it for FUZZ_TEST_TIME
# seconds from a fresh corpus with a fixed seed, or prints SKIPPED without clang's fuzzer runtime.
FUZZ_TIME      ?= 300
FUZZ_TEST_TIME ?= 60
FUZZ_CC        ?= $(if $(CLANG),$(CLANG),clang)
FUZZ_FLAGS     := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
.PHONY: fuzz test-fuzz

$(BUILD)/fuzz_params: tests/fuzz_params.c tests/ref.h tests/talloc.h flashattn.h | $(BUILD)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(CSTD) $(WARN) -I. $< -o $@ $(LDLIBS)

fuzz: deps $(BUILD)/fuzz_params
	@mkdir -p $(BUILD)/fuzz_corpus
	$(SAN_ENV) ./$(BUILD)/fuzz_params -max_total_time=$(FUZZ_TIME) -artifact_prefix=$(BUILD)/ $(BUILD)/fuzz_corpus

test-fuzz: | $(BUILD)
	@if printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
	    | $(FUZZ_CC) -x c -fsanitize=fuzzer - -o $(BUILD)/fuzz_probe 2>/dev/null; then \
	  echo "fuzzing fa_params for $(FUZZ_TEST_TIME) s (tests/fuzz_params.c; make fuzz FUZZ_TIME=... for longer)"; \
	  $(MAKE) --no-print-directory $(BUILD)/fuzz_params && rm -rf $(BUILD)/fuzz_corpus_test && mkdir -p $(BUILD)/fuzz_corpus_test && \
	  { $(SAN_ENV) ./$(BUILD)/fuzz_params -max_total_time=$(FUZZ_TEST_TIME) -seed=1 -print_final_stats=1 \
	      -artifact_prefix=$(BUILD)/ $(BUILD)/fuzz_corpus_test > $(BUILD)/fuzz_test.log 2>&1; rc=$$?; } ; \
	  grep -E "^stat::(number_of_executed_units|new_units_added)" $(BUILD)/fuzz_test.log; \
	  if [ $$rc -ne 0 ]; then tail -n 40 $(BUILD)/fuzz_test.log; echo "FAILED: the fuzzer (log: $(BUILD)/fuzz_test.log)"; exit 1; fi; \
	  echo "ok: fuzzer, no failure in $(FUZZ_TEST_TIME) s"; \
	else echo "SKIPPED: clang's libFuzzer runtime not found (Debian: apt-get install clang libclang-rt-dev), the fuzzer was not run"; fi

# compile checks, each linked and run: C99 -pedantic with two translation units (impl.c holds the
# implementation, user.c only the declarations); the same as C++ (g++ -pedantic); FLASHATTN_NO_BLAS;
# FLASHATTN_STATIC with two private copies in one program (static.c + static2.c); FLASHATTN_MALLOC
# alone is an error; clang if present.
.PHONY: test-compile
test-compile: | $(BUILD)
	$(CC) $(CSTD) $(WARN) -O2 -I. -c tests/compile/impl.c -o $(BUILD)/cc_impl.o
	$(CC) $(CSTD) $(WARN) -O2 -I. -c tests/compile/user.c -o $(BUILD)/cc_user.o
	$(CC) $(BUILD)/cc_impl.o $(BUILD)/cc_user.o -o $(BUILD)/cc_two_tu $(LDLIBS) && ./$(BUILD)/cc_two_tu
	$(CC) $(CSTD) $(WARN) -O2 -I. -DFLASHATTN_NO_BLAS tests/compile/impl.c tests/compile/user.c -o $(BUILD)/cc_noblas -lm -lpthread && ./$(BUILD)/cc_noblas
	$(CC) $(CSTD) $(WARN) -O2 -I. tests/compile/static.c tests/compile/static2.c -o $(BUILD)/cc_static $(LDLIBS) && ./$(BUILD)/cc_static
	$(CXX) $(WARN) -pedantic -O2 -I. -x c++ tests/compile/impl.c -x c++ tests/compile/user.c -o $(BUILD)/cc_cpp $(LDLIBS) && ./$(BUILD)/cc_cpp
	$(CXX) $(WARN) -pedantic -O2 -I. -x c++ tests/compile/static.c -x c++ tests/compile/static2.c -o $(BUILD)/cc_cpp_static $(LDLIBS) && ./$(BUILD)/cc_cpp_static
	@if $(CC) $(CSTD) -I. -DFLASHATTN_MALLOC=malloc -fsyntax-only tests/compile/impl.c 2>/dev/null; then \
	  echo "FAILED: FLASHATTN_MALLOC without FLASHATTN_FREE compiled"; exit 1; \
	else echo "ok: FLASHATTN_MALLOC without FLASHATTN_FREE is a compile error"; fi
	@if [ -n "$(CLANG)" ]; then \
	  echo "$(CLANG) $(CSTD) $(WARN) tests/compile/impl.c tests/compile/user.c"; \
	  $(CLANG) $(CSTD) $(WARN) -O2 -I. tests/compile/impl.c tests/compile/user.c -o $(BUILD)/cc_clang $(LDLIBS) && ./$(BUILD)/cc_clang; \
	else echo "SKIPPED: clang not found"; fi

# ---- CUDA (the GPU machine; CI compiles only) -------------------------------------------------
test-cuda-compile:
	@if command -v $(NVCC) >/dev/null 2>&1; then \
	  echo "nvcc found: compiling the CUDA translation units (compile only, not run here)"; \
	  $(MAKE) --no-print-directory cuda-objs; \
	else echo "SKIPPED: nvcc not found, the CUDA translation units were not compiled"; fi
	@echo "SKIPPED: CUDA tests are not run by make test (no GPU here); run make test-cuda on a GPU machine"

# Every CUDA translation unit, compiled for sm_80 (baseline), sm_90 (H100/H200) and PTX for later
# GPUs; host code -Wall -Wextra -Werror. Objects are linked by test-cuda (and bench-cuda). The
# two-TU link: a C file with its own FLASHATTN_IMPLEMENTATION (tests/compile/impl.c, CPU with
# OpenBLAS) linked with the .cu object, whose CPU functions are weak: no duplicate symbols.
NVCC_ARCH  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_90,code=compute_90
NVCC_FLAGS := -O3 -std=c++14 -t 0 $(NVCC_ARCH) -Xcompiler -Wall,-Wextra,-Werror
CUDA_LIBS  := -lcublas
CUDA_TUS   := $(BUILD)/test_cuda.o $(BUILD)/cuda_quickstart.o $(if $(wildcard bench/bench_cuda.cu),$(BUILD)/bench_cuda.o)

$(BUILD)/test_cuda.o: tests/test_cuda.cu tests/ref.h flashattn.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -DFLASHATTN_NO_BLAS -I. -c $< -o $@

$(BUILD)/cuda_quickstart.o: examples/cuda_quickstart.cu flashattn.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -DFLASHATTN_NO_BLAS -I. -c $< -o $@

$(BUILD)/test_cuda: $(BUILD)/test_cuda.o
	$(NVCC) $(NVCC_ARCH) $< -o $@ $(CUDA_LIBS) -lcmocka -lm -lpthread

$(BUILD)/cuda_quickstart: $(BUILD)/cuda_quickstart.o
	$(NVCC) $(NVCC_ARCH) $< -o $@ $(CUDA_LIBS) -lm -lpthread

$(BUILD)/cuda_two_tu: $(BUILD)/cuda_quickstart.o tests/compile/impl.c flashattn.h | $(BUILD)
	$(CC) $(CSTD) $(WARN) -O2 -I. -c tests/compile/impl.c -o $(BUILD)/cuda_two_tu_impl.o
	$(NVCC) $(NVCC_ARCH) $(BUILD)/cuda_quickstart.o $(BUILD)/cuda_two_tu_impl.o -o $@ $(CUDA_LIBS) $(LDLIBS)

cuda-objs: $(CUDA_TUS) $(BUILD)/cuda_two_tu
	@echo "cuda-objs: compiled $(CUDA_TUS); linked build/cuda_two_tu (C + CUDA implementations, one program)"

$(BUILD)/bench_cuda.o: bench/bench_cuda.cu flashattn.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -I. -c $< -o $@

# ---- CUDA bench (GPU machine): ours beside PyTorch's SDPA, one combined table ---------------------
# bench-cuda-build compiles here (sm_90 only, with the tile-configuration sweep); bench-cuda runs
# bench/run_cuda_bench.sh (bench_cuda, then bench/torch_sdpa.py, then the combined table).
$(BUILD)/bench_cuda: bench/bench_cuda.cu flashattn.h | $(BUILD)
	$(NVCC) -O3 -std=c++14 -gencode arch=compute_90,code=sm_90 -Xcompiler -Wall,-Wextra,-Werror -Xptxas -v \
	  -DFA_BENCH_TUNE -I. $< -o $@ $(CUDA_LIBS) -lm -lpthread 2> $(BUILD)/bench_cuda.ptxas.txt \
	  || { cat $(BUILD)/bench_cuda.ptxas.txt; exit 1; }

bench-cuda-build: $(BUILD)/bench_cuda

bench-cuda: $(BUILD)/bench_cuda
	bench/run_cuda_bench.sh

# On a GPU machine: the suite, then compute-sanitizer memcheck and racecheck on a reduced grid.
test-cuda: $(BUILD)/test_cuda $(BUILD)/cuda_quickstart
	tests/run_cuda.sh

clean:
	rm -rf $(BUILD)
