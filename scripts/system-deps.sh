#!/usr/bin/env bash
# The system packages tsvk needs beyond Python, in one place: `make setup` (so `make demo` and
# `make test`) and CI's .ci/run both run this. Each entry: the Debian package, how to tell it is
# there, and why tsvk needs it.
#   As root (or with passwordless sudo) where apt-get exists: installs what is missing.
#   Otherwise: prints the one `apt-get install` line to run and exits 1, at once.
#   --check: only says what is missing (exit 1 if anything is), installs nothing.
set -euo pipefail

has_java17() { java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])'; }
has_venv() { "${SYSTEM_PYTHON:-python3}" -c 'import ensurepip, venv' 2>/dev/null; }
has_python_headers() { "${SYSTEM_PYTHON:-python3}" -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; }
has_jemalloc() { /sbin/ldconfig -p 2>/dev/null | grep -q 'libjemalloc\.so\.2'; }

# package            check                       why
PACKAGES=(
  "openjdk-17-jre-headless|has_java17|TorchServe's frontend runs on Java 17+"
  "python3-venv|has_venv|make setup builds .venv with python3 -m venv"
  "g++|command -v g++|AOTInductor (the default backend) compiles the model with a C++ compiler"
  "python3-dev|has_python_headers|torch's Inductor includes Python.h when it compiles"
  "bubblewrap|command -v bwrap|tests/helm run the chart's pod spec in a sandbox"
  "hey|command -v hey|the load generator of tsvk robustness (overload burst)"
  "curl|command -v curl|the chart's archive-download init container, run by tests/helm and the pod sandbox"
  "libjemalloc2|has_jemalloc|the workers' malloc with tsvk serve --allocator jemalloc|auto"
  "prometheus|command -v prometheus|tests/helm ask a real Prometheus the chart's dashboard and autoscaling queries"
)

missing=()
for entry in "${PACKAGES[@]}"; do
  IFS='|' read -r package check _why <<<"$entry"
  eval "$check" >/dev/null 2>&1 || missing+=("$package")
done
((${#missing[@]})) || exit 0

line="apt-get install -y ${missing[*]}"
if [[ "${1:-}" == --check ]]; then
  echo "system packages missing: ${missing[*]} (install with: $line)" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "tsvk needs these system packages, and this machine has no apt-get: ${missing[*]} (Java 17+, Python's venv and headers, a C++ compiler, bubblewrap, hey, curl, jemalloc, prometheus)" >&2
  exit 1
fi
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "tsvk needs system packages that are missing. Run this as root, then the same make command again:" >&2
  echo "  $line" >&2
  exit 1
fi
echo "[system-deps] installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
