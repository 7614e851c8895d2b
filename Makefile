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

EXAMPLES := quickstart naive_vs_tiled split_keys train_step

.PHONY: all deps run test bench test-cuda bench-cuda bench-cuda-build bench-cuda-backward clean
.PHONY: mpi-example test-mpi test-mpi-steps bench-mpi

all: deps $(addprefix $(BUILD)/,$(EXAMPLES)) $(BUILD)/bench $(BUILD)/bench_backward
all: mpi-example

# ---- dependencies: Debian's libopenblas-dev and libcmocka-dev ----------------------------------
# Installed with apt-get when missing and we are root; otherwise deps stops and prints the exact
# command. Without dpkg (not Debian), a one-line compile and link against both libraries decides.
# Optional: clang and its runtimes (libFuzzer, sanitizers) for the fuzzer (make fuzz; make test runs
# it for a minute when they are there): installed too when root, else a note; never an error.
DEPS_PKGS := libopenblas-dev libcmocka-dev
# OpenMPI for examples/ring_attention_mpi.c (make test-mpi)
MPI_PKGS  := libopenmpi-dev openmpi-bin
DEPS_PKGS += $(MPI_PKGS)
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

# the quick examples (train_step: a second), then the article's experiments (about half a minute on 2 cores)
run: deps $(addprefix $(BUILD)/,$(EXAMPLES))
	./$(BUILD)/quickstart
	./$(BUILD)/split_keys
	./$(BUILD)/train_step
	./$(BUILD)/naive_vs_tiled

# ---- bench -------------------------------------------------------------------------------------
# Built as a user would build it: plain -O2, no -march (the SIMD path is picked at run time).
# `make bench BENCH_ARGS=--csv` (or --quick, --threads N, --max-s N, --naive-mem GiB, --pool,
# --no-row-sgemm, --no-naive, --no-scaling, --few-reps); about 5 min.
BENCH_ARGS ?=
$(BUILD)/bench: bench/bench.c bench/bench_util.h flashattn.h | $(BUILD)
	$(CC) -O2 -g $(CSTD) $(WARN) -I. $< -o $@ $(LDLIBS)

# then the backward's bench (bench/bench_backward.c): `make bench BENCH_BWD_ARGS="--quick"` (or --csv,
# --threads N, --max-s N, --naive-mem GiB, --no-naive, --no-row-sgemm, --pool, --few-reps); about 4 min
BENCH_BWD_ARGS ?=
$(BUILD)/bench_backward: bench/bench_backward.c bench/bench_util.h flashattn.h | $(BUILD)
	$(CC) -O2 -g $(CSTD) $(WARN) -I. $< -o $@ $(LDLIBS)

bench: deps $(BUILD)/bench $(BUILD)/bench_backward
	./$(BUILD)/bench $(BENCH_ARGS)
	./$(BUILD)/bench_backward $(BENCH_BWD_ARGS)

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

# the half-precision tests again with FLASHATTN_NO_AVX512BF16: on an AVX512-BF16 CPU the default
# build runs bf16 on vdpbf16ps, this one on the AVX-512 conversion path (issue 16)
$(BUILD)/test_flashattn_nobf16: $(TEST_DEPS) | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -DFLASHATTN_NO_AVX512BF16 -I. $< -o $@ $(TEST_LIBS)

# the half-precision tests on the AMX path with the tile instructions emulated in C (FA__AMX_EMULATE,
# on a CPU with AVX512-BF16), every other shared Vt block made by the tiles' own copies
# (FA__AMX_VT_TEST_OWN): the AMX forward's and backward's data movement on a machine without AMX
$(BUILD)/test_flashattn_amxemu: $(TEST_DEPS) | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -DFA__AMX_EMULATE -DFA__AMX_VT_TEST_OWN -I. $< -o $@ $(TEST_LIBS)

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

$(BUILD)/test_backward_amxemu: $(BWD_DEPS) | $(BUILD)
	$(CC) $(CFLAGS) $(CSTD) $(WARN) -DFA__AMX_EMULATE -I. $< -o $@ $(TEST_LIBS)

# ---- make test: every step run, shown and counted; the summary at the end ----------------------
# Each step goes through tests/run_step.sh, which prints it as it runs, keeps its output in
# build/logs/ and writes one line to build/summary.txt (PASS, FAIL or SKIP, seconds, what, the
# cmocka counts or what the step reported). A failed step does not stop the others (the recipe
# lines are `-`); tests/summary.sh prints the summary last and fails `make test` if any step failed.
# Steps: the compile checks, the README's C snippets and the header's CONTENTS, the examples built
# and run, the benches built, the forward and backward suites in four builds each, the install of
# a consumer through pkg-config and CMake, the CUDA compile, the fuzzer and the MPI ring. About
# 8 min on 2 cores with nvcc present (495 s measured on a fresh clone, 213 s of it the CUDA
# compile of five translation units); `make test CUDA=0` skips the CUDA compile (so does NVCC=/nonexistent).
CUDA       ?= 1
SUMMARY    := $(BUILD)/summary.txt
STEP       := tests/run_step.sh $(SUMMARY)
SKIP_STEP  := tests/run_step.sh --skip $(SUMMARY)
CLANGXX    ?= $(shell command -v clang++ 2>/dev/null)
# the steps call make through this, not $(MAKE) itself, so that `make -n test` only prints them
SUBMAKE     = $(MAKE) --no-print-directory
TEST_STEPS := test-compile test-readme test-examples test-suites test-install test-cuda-compile

.PHONY: test-steps test-readme test-examples test-suites test-install
test: deps
	@mkdir -p $(BUILD) && rm -rf $(BUILD)/logs && : > $(SUMMARY)
	@t0=$$(date +%s); rc=0; $(MAKE) --no-print-directory -k test-steps || rc=$$?; \
	  tests/summary.sh $(SUMMARY) $$rc $$(( $$(date +%s) - t0 ))

test-steps: $(TEST_STEPS)
# A step added elsewhere: a target whose recipe lines are `-@$(STEP) "what it is" 'command'`, and
# `test-steps: that-target` beside it (a later `TEST_STEPS +=` would come too late for this rule).

# ---- the fuzzer (tests/fuzz_params.c: libFuzzer with ASan and UBSan; clang and its runtime) ------
# make fuzz runs it for FUZZ_TIME seconds (0: until stopped) on build/fuzz_corpus, which grows from
# run to run; a failing input is written to build/crash-*. make test runs it for FUZZ_TEST_TIME
# seconds from a fresh corpus with a fixed seed (a step of its own), or skips it without clang's
# fuzzer runtime (the deps step installs it when root).
FUZZ_TIME      ?= 300
FUZZ_TEST_TIME ?= 60
FUZZ_CC        ?= $(if $(CLANG),$(CLANG),clang)
FUZZ_FLAGS     := -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
FUZZ_PROBE      = printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' \
                  | $(FUZZ_CC) -x c -fsanitize=fuzzer - -o $(BUILD)/fuzz_probe >/dev/null 2>&1
.PHONY: fuzz test-fuzz

$(BUILD)/fuzz_params: tests/fuzz_params.c tests/ref.h tests/talloc.h flashattn.h | $(BUILD)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(CSTD) $(WARN) -I. $< -o $@ $(LDLIBS)

fuzz: deps $(BUILD)/fuzz_params
	@mkdir -p $(BUILD)/fuzz_corpus
	$(SAN_ENV) ./$(BUILD)/fuzz_params -max_total_time=$(FUZZ_TIME) -artifact_prefix=$(BUILD)/ $(BUILD)/fuzz_corpus

test-steps: test-fuzz
test-fuzz: | $(BUILD)
	-@if $(FUZZ_PROBE); then \
	  $(STEP) "fuzz: tests/fuzz_params.c for $(FUZZ_TEST_TIME) s (libFuzzer, ASan, UBSan; fixed seed, fresh corpus)" \
	    '$(SUBMAKE) $(BUILD)/fuzz_params && rm -rf $(BUILD)/fuzz_corpus_test && mkdir -p $(BUILD)/fuzz_corpus_test && \
	     { $(SAN_ENV) ./$(BUILD)/fuzz_params -max_total_time=$(FUZZ_TEST_TIME) -seed=1 -print_final_stats=1 \
	         -artifact_prefix=$(BUILD)/ $(BUILD)/fuzz_corpus_test > $(BUILD)/fuzz_test.log 2>&1; rc=$$?; } ; \
	     echo "step-detail: $$(sed -n "s/^stat::number_of_executed_units: *//p" $(BUILD)/fuzz_test.log) inputs run"; \
	     if [ $$rc -ne 0 ]; then tail -n 40 $(BUILD)/fuzz_test.log; echo "the fuzzer failed: $(BUILD)/fuzz_test.log, input in $(BUILD)/crash-*"; fi; \
	     exit $$rc'; \
	else $(SKIP_STEP) "fuzz: tests/fuzz_params.c" "clang with its libFuzzer runtime not found (Debian: apt-get install clang libclang-rt-dev)"; fi

# compile checks, each linked and run: C99 -pedantic with two translation units (impl.c holds the
# implementation, user.c only the declarations); the same as C++ (g++ -pedantic); FLASHATTN_NO_BLAS;
# FLASHATTN_STATIC with two private copies in one program (static.c + static2.c); FLASHATTN_MALLOC
# alone is an error; clang if present; FA_PARAMS_INIT in C and C++ (gcc and clang).
.PHONY: test-compile
test-compile: | $(BUILD)
	-@$(STEP) "compile: C99 -pedantic, two translation units (impl.c + user.c), linked and run" \
	  '$(CC) $(CSTD) $(WARN) -O2 -I. -c tests/compile/impl.c -o $(BUILD)/cc_impl.o && \
	   $(CC) $(CSTD) $(WARN) -O2 -I. -c tests/compile/user.c -o $(BUILD)/cc_user.o && \
	   $(CC) $(BUILD)/cc_impl.o $(BUILD)/cc_user.o -o $(BUILD)/cc_two_tu $(LDLIBS) && ./$(BUILD)/cc_two_tu'
	-@$(STEP) "compile: C99 -pedantic, FLASHATTN_NO_BLAS (-lm -lpthread only), linked and run" \
	  '$(CC) $(CSTD) $(WARN) -O2 -I. -DFLASHATTN_NO_BLAS tests/compile/impl.c tests/compile/user.c -o $(BUILD)/cc_noblas -lm -lpthread && ./$(BUILD)/cc_noblas'
	-@$(STEP) "compile: C99 -pedantic, FLASHATTN_STATIC, two private copies in one program" \
	  '$(CC) $(CSTD) $(WARN) -O2 -I. tests/compile/static.c tests/compile/static2.c -o $(BUILD)/cc_static $(LDLIBS) && ./$(BUILD)/cc_static'
	-@$(STEP) "compile: C++ (g++ -pedantic), two translation units, linked and run" \
	  '$(CXX) $(WARN) -pedantic -O2 -I. -x c++ tests/compile/impl.c -x c++ tests/compile/user.c -o $(BUILD)/cc_cpp $(LDLIBS) && ./$(BUILD)/cc_cpp'
	-@$(STEP) "compile: C++ (g++ -pedantic), FLASHATTN_STATIC, two private copies" \
	  '$(CXX) $(WARN) -pedantic -O2 -I. -x c++ tests/compile/static.c -x c++ tests/compile/static2.c -o $(BUILD)/cc_cpp_static $(LDLIBS) && ./$(BUILD)/cc_cpp_static'
	-@$(STEP) "compile: FLASHATTN_MALLOC without FLASHATTN_FREE is a compile error" \
	  'if $(CC) $(CSTD) -I. -DFLASHATTN_MALLOC=malloc -fsyntax-only tests/compile/impl.c 2>/dev/null; then \
	     echo "FAILED: FLASHATTN_MALLOC without FLASHATTN_FREE compiled"; exit 1; \
	   else echo "ok: FLASHATTN_MALLOC without FLASHATTN_FREE is a compile error"; fi'
	-@if [ -n "$(CLANG)" ]; then \
	  $(STEP) "compile: clang C99 -pedantic, two translation units, linked and run" \
	    '$(CLANG) $(CSTD) $(WARN) -O2 -I. tests/compile/impl.c tests/compile/user.c -o $(BUILD)/cc_clang $(LDLIBS) && ./$(BUILD)/cc_clang'; \
	else $(SKIP_STEP) "compile: clang" "clang not found"; fi
	-@$(STEP) "compile: fa_params p = FA_PARAMS_INIT; in C99 and C++ (gcc, g++$(if $(CLANG),$(comma) clang)$(if $(CLANGXX),$(comma) clang++)), -Wmissing-field-initializers" \
	  'for c in "$(CC) $(CSTD)" "$(CXX) -x c++ -pedantic" $(if $(CLANG),"$(CLANG) $(CSTD)") $(if $(CLANGXX),"$(CLANGXX) -x c++ -pedantic"); do \
	     $$c $(WARN) -Wmissing-field-initializers -O2 -I. tests/compile/init.c -o $(BUILD)/cc_init $(LDLIBS) && ./$(BUILD)/cc_init || exit 1; \
	   done'
comma := ,

# Every ```c block of README.md, compiled as C99 -pedantic and as C++ (and by clang, clang++).
test-readme: | $(BUILD)
	-@$(STEP) "README: every C snippet compiled as C99 -pedantic and as C++" \
	  'tests/readme_snippets.sh $(BUILD)/readme "$(CC)" "$(CXX)" "$(CLANG)"'
	-@$(STEP) "header: the CONTENTS list and the section banners agree, in order" 'sh tests/contents.sh flashattn.h'

# The examples built and run (their exit status is their check: allclose against the other path,
# or against fa_merge's split); naive_vs_tiled with --quick, which gives its timing section (c) a
# 2 s budget instead of 40 s (`make run` runs it all). The bench is built, not run (`make bench`).
test-examples: | $(BUILD)
	-@$(STEP) "example: quickstart, built and run (naive and tiled allclose)" \
	  '$(SUBMAKE) $(BUILD)/quickstart && ./$(BUILD)/quickstart'
	-@$(STEP) "example: split_keys, built and run (chunks merged by fa_merge = one call)" \
	  '$(SUBMAKE) $(BUILD)/split_keys && ./$(BUILD)/split_keys'
	-@$(STEP) "example: train_step, built and run (gradients checked by central differences; the loss falls)" \
	  '$(SUBMAKE) $(BUILD)/train_step && ./$(BUILD)/train_step'
	-@$(STEP) "example: naive_vs_tiled --quick, built and run (all checks; timing on a 2 s budget)" \
	  '$(SUBMAKE) $(BUILD)/naive_vs_tiled && ./$(BUILD)/naive_vs_tiled --quick'
	-@$(STEP) "bench: built (not run; make bench runs it, about 5 min)" \
	  '$(SUBMAKE) $(BUILD)/bench'
	-@$(STEP) "bench_backward: built (not run; make bench runs it after bench, about 4 min)" \
	  '$(SUBMAKE) $(BUILD)/bench_backward'

# The cmocka suites (forward, backward), four builds each.
test-suites: | $(BUILD)
	-@$(STEP) "cmocka test_flashattn (OpenBLAS, this CPU's best SIMD path)" \
	  '$(SUBMAKE) $(BUILD)/test_flashattn && ./$(BUILD)/test_flashattn'
	-@$(STEP) "cmocka test_flashattn_noblas (FLASHATTN_NO_BLAS, portable C: FLASHATTN_ISA=0)" \
	  '$(SUBMAKE) $(BUILD)/test_flashattn_noblas && ./$(BUILD)/test_flashattn_noblas'
	-@$(STEP) "cmocka test_flashattn_avx2 (FLASHATTN_ISA=1)" \
	  '$(SUBMAKE) $(BUILD)/test_flashattn_avx2 && ./$(BUILD)/test_flashattn_avx2'
	-@$(STEP) "cmocka test_flashattn_san (ASan + UBSan)" \
	  '$(SUBMAKE) $(BUILD)/test_flashattn_san && $(SAN_ENV) ./$(BUILD)/test_flashattn_san'
	-@$(STEP) "cmocka test_flashattn_nobf16 (the half-precision tests, FLASHATTN_NO_AVX512BF16: bf16 by conversion)" \
	  '$(SUBMAKE) $(BUILD)/test_flashattn_nobf16 && FA_TEST_FILTER="test_half*" ./$(BUILD)/test_flashattn_nobf16'
	-@$(STEP) "cmocka test_flashattn_amxemu and test_backward_amxemu (FA__AMX_EMULATE: the AMX path with its tile instructions in C, asserted where the CPU has AVX512-BF16; every other shared Vt block through a tile's own copy)" \
	  '$(SUBMAKE) $(BUILD)/test_flashattn_amxemu $(BUILD)/test_backward_amxemu && \
	   if grep -qw avx512_bf16 /proc/cpuinfo; then export FA_TEST_EXPECT_AMX=1; fi; \
	   ./$(BUILD)/test_flashattn_amxemu && ./$(BUILD)/test_backward_amxemu'
	-@$(STEP) "cmocka test_backward (OpenBLAS, this CPU's best SIMD path)" \
	  '$(SUBMAKE) $(BUILD)/test_backward && ./$(BUILD)/test_backward'
	-@$(STEP) "cmocka test_backward_noblas (FLASHATTN_NO_BLAS, portable C: FLASHATTN_ISA=0)" \
	  '$(SUBMAKE) $(BUILD)/test_backward_noblas && ./$(BUILD)/test_backward_noblas'
	-@$(STEP) "cmocka test_backward_avx2 (FLASHATTN_ISA=1)" \
	  '$(SUBMAKE) $(BUILD)/test_backward_avx2 && ./$(BUILD)/test_backward_avx2'
	-@$(STEP) "cmocka test_backward_san (ASan + UBSan)" \
	  '$(SUBMAKE) $(BUILD)/test_backward_san && $(SAN_ENV) ./$(BUILD)/test_backward_san'

# make install into a temporary prefix, a consumer built against it, make uninstall (see the
# install block below and tests/consumer/run.sh).
test-install: | $(BUILD)
	-@$(STEP) "install: consumer through pkg-config (flashattn, flashattn-noblas)" 'MAKE="$(SUBMAKE)" CC="$(CC)" tests/consumer/run.sh pkg-config'
	-@$(STEP) "install: consumer through CMake find_package(flashattn 0.2)" 'MAKE="$(SUBMAKE)" CC="$(CC)" tests/consumer/run.sh cmake'
	-@$(STEP) "install: DESTDIR staging and uninstall" 'MAKE="$(SUBMAKE)" CC="$(CC)" tests/consumer/run.sh destdir'

# ---- MPI: ring attention across processes (examples/ring_attention_mpi.c) ---------------------
# Built and tested when mpicc and mpirun exist (checked when the recipe runs, so a deps step that
# has just installed them counts). test-mpi, a step of make test, runs it under mpirun with 1, 2, 3
# and 4 ranks on this machine (oversubscribed), causal and not, each checked against one process
# (API.md's fp32 tolerances, forward and backward); MQA with 2 threads a rank at 2 and 4 ranks;
# then once with --perturb, which must fail. About 15 s on 2 cores. In a container as root:
# OpenMPI refuses root without the two ALLOW variables (and --allow-run-as-root); plm=isolated
# starts the ranks here without ssh; shared memory (vader) without single-copy CMA, which needs
# ptrace, often denied there. timeout: a ring that deadlocks fails instead of hanging make test.
MPICC     ?= mpicc
MPIRUN    ?= mpirun
MPI_ENV   := OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated
MPI_FLAGS ?= --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader \
             --mca btl_vader_single_copy_mechanism none
MPI_RUN   := $(MPI_ENV) timeout 300 $(MPIRUN) $(MPI_FLAGS)
MPI_SMALL := --S 312 --B 2 --H 4 --Hkv 2 --D 32
MPI_MQA   := --S 1024 --B 1 --H 8 --Hkv 1 --D 64 --threads 2
MPI_BIN   := ./$(BUILD)/ring_attention_mpi

$(BUILD)/ring_attention_mpi: examples/ring_attention_mpi.c flashattn.h | $(BUILD)
	$(MPICC) $(CFLAGS) $(CSTD) $(WARN) -I. $< -o $@ $(LDLIBS)

mpi-example:
	@if command -v $(MPICC) >/dev/null 2>&1; then $(MAKE) --no-print-directory $(BUILD)/ring_attention_mpi; \
	else echo "SKIPPED: mpicc not found, $(BUILD)/ring_attention_mpi not built"; fi

# test-mpi-steps: the steps, in make test's summary; make test-mpi: the same alone, with their
# summary lines, failing when one failed
test-steps: test-mpi-steps
test-mpi: | $(BUILD)
	@: > $(BUILD)/summary-mpi.txt; $(MAKE) --no-print-directory test-mpi-steps SUMMARY=$(BUILD)/summary-mpi.txt; \
	  echo; cat $(BUILD)/summary-mpi.txt; ! grep -q '^FAIL' $(BUILD)/summary-mpi.txt

test-mpi-steps: | $(BUILD)
	-@if command -v $(MPICC) >/dev/null 2>&1 && command -v $(MPIRUN) >/dev/null 2>&1; then \
	  $(STEP) "MPI: ring_attention_mpi built with mpicc (C99 -pedantic -Werror)" '$(SUBMAKE) $(BUILD)/ring_attention_mpi' || exit 1; \
	  for np in 1 2 3 4; do \
	    $(STEP) "MPI: ring attention, $$np rank(s), causal and not, B=2 H=4 Hkv=2 D=32 S=312: o, lse, dq, dk, dv = one process" \
	      'for c in 1 0; do $(MPI_RUN) -np '$$np' $(MPI_BIN) $(MPI_SMALL) --causal $$c || exit 1; done' || rc=1; \
	  done; \
	  $(STEP) "MPI: ring attention, 2 and 4 ranks of 2 threads, MQA (H=8 Hkv=1 D=64 S=1024, causal) = one process" \
	    'for np in 2 4; do $(MPI_RUN) -np $$np $(MPI_BIN) $(MPI_MQA) --causal 1 || exit 1; done' || rc=1; \
	  $(STEP) "MPI: ring attention --perturb (one wrong dk) fails its check" \
	    'if $(MPI_RUN) -np 2 $(MPI_BIN) $(MPI_SMALL) --perturb >/dev/null 2>&1; then \
	       echo "FAILED: ring_attention_mpi --perturb passed its check"; exit 1; \
	     else echo "ok: the perturbed run failed its check"; fi' || rc=1; \
	  exit $${rc:-0}; \
	else $(SKIP_STEP) "MPI: ring attention (examples/ring_attention_mpi.c)" "mpicc or mpirun not found; Debian: $(MPI_PKGS)"; fi

# the ring's cost on this machine at S = 16k, D = 64, H = 8 (bench/ring_mpi.sh; about 5 min on 2
# cores). OpenMPI's shared-memory default here: single-copy CMA where ptrace allows it, with which a
# receiver pulls a block during its own MPI calls (`make bench-mpi MPI_BENCH_FLAGS="$(MPI_FLAGS)"`:
# copy-in/copy-out, which needs both ranks inside MPI to move the data)
MPI_BENCH_FLAGS ?= --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl self,vader
bench-mpi: deps mpi-example
	MPIRUN=$(MPIRUN) MPI_RUN_FLAGS="$(MPI_BENCH_FLAGS)" sh bench/ring_mpi.sh

# ---- CUDA (the GPU machine; CI compiles only) -------------------------------------------------
# make test compiles the CUDA translation units when nvcc is found (about 9 min on 2 cores) and
# CUDA is not 0; it never runs them (make test-cuda does, on a GPU machine).
test-cuda-compile:
	-@if [ "$(CUDA)" = 0 ]; then \
	  $(SKIP_STEP) "CUDA: compile of the .cu translation units" "CUDA=0"; \
	elif ! command -v $(NVCC) >/dev/null 2>&1; then \
	  $(SKIP_STEP) "CUDA: compile of the .cu translation units" "nvcc not found as $(NVCC)"; \
	else \
	  echo; echo "CUDA: compiling the .cu translation units for sm_80, sm_90, sm_90a and PTX, compile only: about 9 min"; \
	  echo "on 2 cores, with nothing printed meanwhile (make test CUDA=0 skips this step)"; \
	  $(STEP) "CUDA: compile of the .cu translation units (sm_80, sm_90, sm_90a, PTX; not run)" '$(SUBMAKE) cuda-objs'; \
	fi
	-@$(SKIP_STEP) "CUDA: tests" "never run by make test; make test-cuda runs them on a GPU machine"

# Every CUDA translation unit, compiled for sm_80 (baseline), sm_90 and sm_90a (H100/H200; the
# Hopper kernel's wgmma/TMA body exists in sm_90a alone) and PTX for later GPUs; host code -Wall
# -Wextra -Werror. Objects are linked by test-cuda (and bench-cuda). The two-TU link: a C file with its own FLASHATTN_IMPLEMENTATION (tests/compile/impl.c, CPU with
# OpenBLAS) linked with the .cu object, whose CPU functions are weak: no duplicate symbols.
NVCC_ARCH  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
NVCC_FLAGS := -O3 -std=c++14 -t 0 $(NVCC_ARCH) -Xcompiler -Wall,-Wextra,-Werror
CUDA_LIBS  := -lcublas
CUDA_TUS   := $(BUILD)/test_cuda.o $(BUILD)/test_cuda_backward.o $(BUILD)/cuda_quickstart.o $(if $(wildcard bench/bench_cuda.cu),$(BUILD)/bench_cuda.o) \
              $(BUILD)/bench_cuda_backward.o

# A CUDA unit whose ptxas must not serialise wgmma: its messages are kept in build/<unit>.nvcc.txt
# (printed but for the C7519 notes, the compiler's own warpgroup.arrive) and the build fails on
# C7511/C7514/C7515 (wgmma serialised by the compiler; C7514: a non-wgmma instruction reads an
# accumulator inside a wgmma's pipeline stage).
define NVCC_WGMMA_CHECKED
	$(NVCC) $(NVCC_FLAGS) -DFLASHATTN_NO_BLAS -I. -c $< -o $@ 2> $(@:.o=.nvcc.txt) \
	  || { cat $(@:.o=.nvcc.txt); exit 1; }
	@grep -v C7519 $(@:.o=.nvcc.txt) || true
	@if grep -E 'C7511|C7514|C7515' $(@:.o=.nvcc.txt); then \
	  echo "ptxas serialised wgmma (C7511/C7514/C7515): see above"; rm -f $@; exit 1; fi
endef

# test_cuda.o instantiates every forward kernel, the Hopper one for sm_90a among them
$(BUILD)/test_cuda.o: tests/test_cuda.cu tests/ref.h tests/cuda_util.h flashattn.h | $(BUILD)
	$(NVCC_WGMMA_CHECKED)

# test_cuda_backward.o instantiates the Hopper backward (8e3) for sm_90a
$(BUILD)/test_cuda_backward.o: tests/test_cuda_backward.cu tests/ref.h tests/cuda_util.h flashattn.h | $(BUILD)
	$(NVCC_WGMMA_CHECKED)

$(BUILD)/test_cuda_backward: $(BUILD)/test_cuda_backward.o
	$(NVCC) $(NVCC_ARCH) $< -o $@ $(CUDA_LIBS) -lcmocka -lm -lpthread

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
# bench-cuda-build compiles here (sm_90a only, with the tile-configuration sweep); bench-cuda runs
# bench/run_cuda_bench.sh (bench_cuda, then bench/torch_sdpa.py, then the combined table).
$(BUILD)/bench_cuda: bench/bench_cuda.cu flashattn.h | $(BUILD)
	$(NVCC) -O3 -std=c++14 -gencode arch=compute_90a,code=sm_90a -Xcompiler -Wall,-Wextra,-Werror -Xptxas -v \
	  -DFA_BENCH_TUNE -I. $< -o $@ $(CUDA_LIBS) -lm -lpthread 2> $(BUILD)/bench_cuda.ptxas.txt \
	  || { cat $(BUILD)/bench_cuda.ptxas.txt; exit 1; }

$(BUILD)/bench_cuda_backward.o: bench/bench_cuda_backward.cu flashattn.h | $(BUILD)
	$(NVCC) $(NVCC_FLAGS) -I. -c $< -o $@

# the CUDA backward beside PyTorch's (GPU machine): bench_cuda_backward, then torch_sdpa.py --backward
# (sm_90a: the Hopper backward's body exists there alone; -DFA_BENCH_TUNE for --tune and --mma)
$(BUILD)/bench_cuda_backward: bench/bench_cuda_backward.cu flashattn.h | $(BUILD)
	$(NVCC) -O3 -std=c++14 -gencode arch=compute_90a,code=sm_90a -Xcompiler -Wall,-Wextra,-Werror -Xptxas -v \
	  -DFA_BENCH_TUNE -I. $< -o $@ $(CUDA_LIBS) -lm -lpthread 2> $(BUILD)/bench_cuda_backward.ptxas.txt \
	  || { cat $(BUILD)/bench_cuda_backward.ptxas.txt; exit 1; }

bench-cuda-backward: $(BUILD)/bench_cuda_backward
	$(BUILD)/bench_cuda_backward
	python3 bench/torch_sdpa.py --backward

bench-cuda-build: $(BUILD)/bench_cuda

bench-cuda: $(BUILD)/bench_cuda
	bench/run_cuda_bench.sh

# On a GPU machine: the suite, then compute-sanitizer memcheck and racecheck on a reduced grid.
test-cuda: $(BUILD)/test_cuda $(BUILD)/test_cuda_backward $(BUILD)/cuda_quickstart
	tests/run_cuda.sh

# ---- install: the header, pkg-config files and a CMake package -------------------------------
# make install PREFIX=/usr/local (the default) [DESTDIR=stage]: the header is the whole library;
#   $(PREFIX)/include/flashattn.h
#   $(PREFIX)/lib/pkgconfig/flashattn.pc          Cflags -I..., Libs -lopenblas -lm -lpthread
#   $(PREFIX)/lib/pkgconfig/flashattn-noblas.pc   Cflags -I... -DFLASHATTN_NO_BLAS, Libs -lm -lpthread
#   $(PREFIX)/lib/cmake/flashattn/flashattnConfig.cmake, flashattnConfigVersion.cmake:
#     find_package(flashattn 0.2 REQUIRED) gives flashattn::flashattn and flashattn::flashattn_noblas
# make uninstall (same PREFIX, DESTDIR) removes exactly those five files (and the directory
# lib/cmake/flashattn when it is left empty). The version comes from the header. make test
# installs into a temporary prefix, builds a consumer through each, and uninstalls
# (tests/consumer/run.sh); its deps step installs pkg-config and cmake for that.
DEPS_PKGS  += pkg-config cmake
PREFIX     ?= /usr/local
DESTDIR    ?=
INCLUDEDIR ?= $(PREFIX)/include
LIBDIR     ?= $(PREFIX)/lib
PCDIR      ?= $(LIBDIR)/pkgconfig
CMAKEDIR   ?= $(LIBDIR)/cmake/flashattn
FA_VERSION := $(shell sed -n 's/^\#define FLASHATTN_VERSION_STRING "\(.*\)"/\1/p' flashattn.h)
INSTALLED  := $(INCLUDEDIR)/flashattn.h $(PCDIR)/flashattn.pc $(PCDIR)/flashattn-noblas.pc \
              $(CMAKEDIR)/flashattnConfig.cmake $(CMAKEDIR)/flashattnConfigVersion.cmake
# the .pc files say ${prefix}/include when the header lies under PREFIX (pkg-config can relocate it)
PC_INCLUDEDIR = $(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))

.PHONY: install uninstall
install:
	@test -n "$(FA_VERSION)" || { echo "install: no FLASHATTN_VERSION_STRING in flashattn.h"; exit 1; }
	install -d "$(DESTDIR)$(INCLUDEDIR)" "$(DESTDIR)$(PCDIR)" "$(DESTDIR)$(CMAKEDIR)"
	install -m 644 flashattn.h "$(DESTDIR)$(INCLUDEDIR)/flashattn.h"
	for pc in flashattn flashattn-noblas; do \
	  sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@INCLUDEDIR@|$(PC_INCLUDEDIR)|g' -e 's|@VERSION@|$(FA_VERSION)|g' \
	    packaging/$$pc.pc.in > "$(DESTDIR)$(PCDIR)/$$pc.pc" && chmod 644 "$(DESTDIR)$(PCDIR)/$$pc.pc" || exit 1; \
	done
	rel=$$(realpath -m -s --relative-to="$(CMAKEDIR)" "$(INCLUDEDIR)" 2>/dev/null || echo "$(INCLUDEDIR)"); \
	for f in flashattnConfig flashattnConfigVersion; do \
	  sed -e "s|@INCLUDE_REL@|$$rel|g" -e 's|@VERSION@|$(FA_VERSION)|g' packaging/$$f.cmake.in \
	    > "$(DESTDIR)$(CMAKEDIR)/$$f.cmake" && chmod 644 "$(DESTDIR)$(CMAKEDIR)/$$f.cmake" || exit 1; \
	done
	@echo "installed flashattn $(FA_VERSION) under $(DESTDIR)$(PREFIX): $(patsubst $(PREFIX)/%,%,$(INSTALLED))"

uninstall:
	rm -f $(foreach f,$(INSTALLED),"$(DESTDIR)$(f)")
	-@rmdir "$(DESTDIR)$(CMAKEDIR)" 2>/dev/null || true

clean:
	rm -rf $(BUILD)
