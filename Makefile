# ctk: `make demo` runs the main job on the local target; `make test` runs the tests.
# Both install what they need (apt and pip) on a fresh Debian 12 or 13 machine, as root, idempotently.

SHELL := /bin/bash
# Debian's own Python (the one python3-venv is for, and built with its optimizations: a pyenv or
# other build first on PATH may run Ansible at half the speed); any other where it is absent.
PYTHON ?= $(firstword $(wildcard /usr/bin/python3) python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Debian packages the demo (the local target) uses: iproute2 and util-linux for the lab's
# networks and namespaces, packer, mmdebstrap for the bases, ssh for the login node.
DEMO_PKGS := python3-venv iproute2 packer mmdebstrap openssh-client util-linux
# ... and the tests: this machine's own Slurm, slurmdbd, MariaDB and munge (tests run them beside
# the labs), debootstrap (bases where mmdebstrap is missing), the exports' tools and a registry to push to
# (docker-registry), shellcheck, rsync (NeMo-Run's tunnel).
SYS_PKGS := $(DEMO_PKGS) slurm-wlm slurmdbd mariadb-server munge shellcheck debootstrap zstd e2fsprogs buildah kmod rsync docker-registry
# Base debian-13 is debootstrapped from trixie, whose Release debootstrap checks with the trixie
# keys: Debian 12's debian-archive-keyring has them since 2023.3+deb12u2 (Debian 12.11), so an
# older one is upgraded (a Debian 13 host has them).
TRIXIE_KEY := /usr/share/keyrings/debian-archive-trixie-stable.gpg
# tests/integration/test_roles.py applies the roles over Ansible's chroot connection, which only
# community.general has: PyPI's `ansible` (12.x carries ansible-core 2.19, as ctk's own pin gets)
# in its own venv, where the test looks for it, so that it leaves ctk's ansible-core alone.
export CTK_DEV_DIR ?= /var/tmp/ctk-dev
ANSIBLE_VERSION := 12.3.0
ANSIBLE_VENV := $(CTK_DEV_DIR)/venv
ANSIBLE_STAMP := $(ANSIBLE_VENV)/.ansible-$(ANSIBLE_VERSION)

.PHONY: all deps sysdeps demo-sysdeps pydeps testdeps demo test test-accel test-unit test-integration lint clean

all: test

sysdeps demo-sysdeps: PKGS = $(if $(filter demo-sysdeps,$@),$(DEMO_PKGS),$(SYS_PKGS))
sysdeps demo-sysdeps:
	@missing=$$(for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done; \
	  [ -e $(TRIXIE_KEY) ] || echo debian-archive-keyring); \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:" $$missing; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# The venv is filled by uv (ctk's own dependency, so the same release ctk runs): 5 s where pip
# took 12 s here (bench/fresh.py); pip does it where uv cannot be installed or fails.
UV_PIN := uv>=0.13.9,<0.14
# Where the environment keeps Python from writing bytecode (PYTHONDONTWRITEBYTECODE), uv writes
# it at install: else every ansible-playbook start compiles Ansible again (2.7 s to 1.2 s here).
UV_COMPILE := $(if $(PYTHONDONTWRITEBYTECODE),--compile-bytecode)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check '$(UV_PIN)' && \
	  $(VENV)/bin/uv pip install -q --python $(PY) $(UV_COMPILE) -e '.[test]' || \
	  $(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

pydeps: $(STAMP)

deps: sysdeps pydeps

$(ANSIBLE_STAMP):
	$(PYTHON) -m venv $(ANSIBLE_VENV)
	$(ANSIBLE_VENV)/bin/python -m pip install -q 'ansible==$(ANSIBLE_VERSION)'
	$(ANSIBLE_VENV)/bin/ansible-doc -t connection community.general.chroot >/dev/null
	touch $@

# The third-party clients the integration tests drive (the `clients` extra).
CLIENTS_STAMP := $(VENV)/.clients-installed
$(CLIENTS_STAMP): $(STAMP)
	$(VENV)/bin/uv pip install -q --python $(PY) $(UV_COMPILE) -e '.[test,clients]' || \
	  $(PY) -m pip install -q --disable-pip-version-check -e '.[test,clients]'
	touch $@

testdeps: deps $(ANSIBLE_STAMP) $(CLIENTS_STAMP)

# The main job on the local target: build and verify the lab image (cached after the first
# run), boot the lab cluster, run a 2-node job on it, train a small JAX model data-parallel on
# 2 nodes (submitted through the login node over SSH, as the lab's user researcher), and leave
# the cluster up.
LAB_SSH := -F lab/lab/ssh_config
demo:
	@# apt and the venv side by side, where the venv does not wait for apt's python3-venv
	@if $(PYTHON) -c 'import ensurepip' 2>/dev/null; then $(MAKE) --no-print-directory -j2 demo-sysdeps pydeps; \
	else $(MAKE) --no-print-directory demo-sysdeps && $(MAKE) --no-print-directory pydeps; fi
	$(VENV)/bin/ctk show blueprints/lab.yaml
	$(VENV)/bin/ctk image build blueprints/lab.yaml
	$(VENV)/bin/ctk deploy blueprints/lab.yaml -o lab
	@echo "==> a 2-node job: srun -N2 --chdir=/tmp hostname"
	@eval "$$($(VENV)/bin/ctk env lab)" && srun -N2 --chdir=/tmp hostname
	@echo "==> JAX training on 2 nodes, through the login node: sbatch/examples/train.py with the jax-train template"
	scp -q $(LAB_SSH) sbatch/examples/train.py lab-login-0:train.py
	ssh $(LAB_SSH) lab-login-0 rm -rf ckpt-demo
	@set -e; host="--host lab-login-0 --ssh-config lab/lab/ssh_config"; \
	id=$$($(VENV)/bin/ctk job submit jax-train --nodes 2 --set partition=debug --set preemptible=true $$host \
	  --wait -- python3 /home/researcher/train.py --steps 50 --checkpoint-dir /home/researcher/ckpt-demo); \
	$(VENV)/bin/ctk job logs $$id $$host | grep -E '^(train:|step=(1|10|20|30|40|50) )'
	@echo
	@echo "The lab cluster is up. Use it: eval \"\$$(.venv/bin/ctk env lab)\"; sinfo  --  ctk status lab  --  stop it: .venv/bin/ctk destroy lab"

# Every test, the accelerator images' too: the GPU and TPU lab images (a kernel, the NVIDIA
# driver's DKMS build, 3 GB of CUDA wheels) and the Debian 12 lab's image build in the
# background beside the other tests, at the lowest CPU and I/O priority, and their tests run
# last (tests/integration/conftest.py).
# `make test-accel` runs only those.
ACCEL_TESTS := tests/integration/test_accelerator_images.py

# The tests run on TEST_WORKERS pytest-xdist workers (0: one process): a test module runs whole
# on one worker (an integration module with its lab), in the order collected (the soak's,
# the Debian 12 lab's and the accelerator images' modules last: they wait for background
# work), every worker sharing the session's image store and the background work
# (tests/integration/conftest.py). Most integration tests wait on Slurm, on a job, on a node or
# on a download far more than they compute: on 2 cores, two workers left a third of the CPU idle
# (36 CPU-minutes in 29 minutes), and three ran a fresh clone's suite in 22:27 against 28:32
# (CTK_TEST_TIMELINE=FILE shows which worker ran what, when).
TEST_WORKERS ?= 3
XDIST = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test: testdeps lint
	$(PY) -m pytest -q -p no:cacheprovider $(XDIST) --durations=30 tests

# The checks of code and roles, make test runs them first (each tool's settings in pyproject.toml
# or beside what it checks): ruff (the rules of [tool.ruff.lint]), mypy over toolkit/ctk
# ([tool.mypy]), ansible-lint's production profile on the roles ctk ships, shellcheck on the
# repository's shell files, and the documentation site (mkdocs build --strict: every link
# leads somewhere). The shell programs ctk writes at run time are checked by
# tests/unit/test_shell_programs.py, the import layers by tests/unit/test_layers.py.
# Their tools are the `lint` extra, installed beside the venv on first use.
LINT_STAMP := $(VENV)/.lint-installed
$(LINT_STAMP): $(STAMP)
	$(VENV)/bin/uv pip install -q --python $(PY) $(UV_COMPILE) -e '.[test,lint]' || \
	  $(PY) -m pip install -q --disable-pip-version-check -e '.[test,lint]'
	touch $@

SHELL_FILES := .ci/run $(wildcard tests/gpu/*.sh)
lint: $(LINT_STAMP)
	$(VENV)/bin/ruff check toolkit tests bench
	$(VENV)/bin/mypy
	cd toolkit/ctk/data/ansible && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" ansible-lint -q --offline --profile production --nocolor
	@command -v shellcheck >/dev/null || { echo "make lint: shellcheck is not installed: apt-get install shellcheck (make sysdeps installs it)" >&2; exit 2; }
	shellcheck $(SHELL_FILES)
	site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && $(VENV)/bin/mkdocs build --strict --site-dir "$$site"

test-accel: testdeps
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 $(ACCEL_TESTS)

# The fast tier: no root, no apt, no network, no daemon; as another user than root, the tests
# that need root (marked `root`) are left out.
UNIT_WORKERS ?= $(shell nproc)
test-unit: pydeps
	$(PY) -m pytest -q -p no:cacheprovider -n $(UNIT_WORKERS) $(if $(filter 0,$(shell id -u)),,-m "not root") tests/unit

test-integration: testdeps
	$(PY) -m pytest -q -p no:cacheprovider -m integration tests

clean:
	rm -rf $(VENV) build *.egg-info toolkit/*.egg-info
