# Set-up happens on demand: `make demo` and `make test` each create .venv and install gpuaudit
# (with its test tools) when needed, so both work on a fresh machine with python3, make and apt.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.gpuaudit-installed
APT    := $(shell [ "$$(id -u)" = 0 ] && echo apt-get || echo sudo apt-get)

.PHONY: demo test lint fmt clean system-deps bytecode

$(STAMP): pyproject.toml
	@if ! $(PYTHON) -m venv --help >/dev/null 2>&1 || ! $(PYTHON) -c 'import ensurepip' 2>/dev/null; then \
		echo "installing python3-venv"; $(APT) update -qq && $(APT) install -y -qq python3-venv; fi
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# The SSH integration test starts a real sshd on 127.0.0.1; the browser tests drive Debian's
# chromium (Playwright's own browser downloads are never used); tests/debroot builds Debian roots
# with debootstrap and indexes its dummy packages with dpkg-scanpackages (dpkg-dev); the Slurm
# drain hook and the Slurm cross-checks are tested against a real slurmctld, slurmd and munged
# (slurm-wlm, munge); the alert rules `gpuaudit alerts` prints are checked by Debian's promtool
# (prometheus); the Kubernetes view is read with a real kubectl (kubernetes-client).
system-deps:
	@command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || { \
		echo "installing openssh-server"; $(APT) update -qq && \
		DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq openssh-server openssh-client; }
	@[ -x /usr/bin/chromium ] || { \
		echo "installing chromium"; $(APT) update -qq && \
		DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq chromium; }
	@{ command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ]; } && \
		command -v dpkg-scanpackages >/dev/null 2>&1 || { \
		echo "installing debootstrap dpkg-dev"; $(APT) update -qq && \
		DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq debootstrap dpkg-dev; }
	@{ [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/munged ]; } || { \
		echo "installing slurm-wlm munge"; $(APT) update -qq && \
		DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq slurm-wlm munge; }
	@[ -x /usr/bin/promtool ] || { \
		echo "installing prometheus (promtool)"; $(APT) update -qq && \
		DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq --no-install-recommends prometheus; }
	@command -v kubectl >/dev/null 2>&1 || { \
		echo "installing kubernetes-client (kubectl)"; $(APT) update -qq && \
		DEBIAN_FRONTEND=noninteractive $(APT) install -y -qq kubernetes-client; }

# gpuaudit is installed editable, so pip compiles none of its modules; pyinfra's command writes
# no bytecode, nor does anything where the environment sets PYTHONDONTWRITEBYTECODE, and every
# gpuaudit process (the CLI, each pyinfra run, each test's subprocess) would compile them all
# again: about 0.4 s of CPU each. Compiled here as an installed package is; a module changed
# since is compiled in memory as before. A tree that cannot be written to is left as it is: its
# modules are compiled when loaded.
# The page templates' compiled code is kept the same way (report/template_cache.py).
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q src >/dev/null || \
		echo "bytecode: some modules were not compiled ahead; they are compiled when loaded"
	@$(BIN)/python -c "from gpuaudit.report import html; from gpuaudit.upgrade import report; \
		from gpuaudit.report.template_cache import warm; \
		warm([html.environment(), report.environment()])" || \
		echo "bytecode: the page templates were not compiled ahead; they are compiled when used"

demo: $(STAMP) bytecode
	$(BIN)/gpuaudit audit inventory/demo.py --policy policies/demo.yaml \
		--kube-nodes src/gpuaudit/sim/data/kubernetes-nodes.json

test: $(STAMP) bytecode system-deps lint
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests deploys inventory benchmarks
	$(BIN)/ruff format --check src tests deploys inventory benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

fmt: $(STAMP)
	$(BIN)/ruff format src tests deploys inventory benchmarks
	$(BIN)/ruff check --fix src tests deploys inventory benchmarks

clean:
	rm -rf $(VENV) .gpuaudit-sim build *.egg-info
	find src -name __pycache__ -prune -exec rm -rf {} +
