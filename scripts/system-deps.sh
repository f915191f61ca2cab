#!/usr/bin/env bash
# The system packages tsvk needs beyond Python, in one place. Each entry: the Debian package, what needs it
# (build: building archives and serving them on tsvk's own engine; torchserve: the TorchServe engine; test: only
# the tests), how to tell it is there, and why.
#   scripts/system-deps.sh               the packages for building and for the kserve engine: `make setup` runs this
#   scripts/system-deps.sh --torchserve  those and Java: the make targets that start TorchServe run this
#   scripts/system-deps.sh --test        all of them and the tests' own: `make test` and CI's .ci/run run this
# As root (or with passwordless sudo) where apt-get exists: installs what is missing.
# Otherwise: prints the one `apt-get install` line to run and exits 1, at once.
#   --check: only says what is missing (exit 1 if anything is), installs nothing.
set -euo pipefail

has_java17() { java -version 2>&1 | grep -qE 'version "(1[7-9]|[2-9][0-9])'; }
has_venv() { "${SYSTEM_PYTHON:-python3}" -c 'import ensurepip, venv' 2>/dev/null; }
has_python_headers() { "${SYSTEM_PYTHON:-python3}" -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' 2>/dev/null; }
has_jemalloc() { /sbin/ldconfig -p 2>/dev/null | grep -q 'libjemalloc\.so\.2'; }

# package            for    check                  why
PACKAGES=(
  "python3-venv|build|has_venv|make setup builds .venv with python3 -m venv"
  "g++|build|command -v g++|AOTInductor (the default backend) compiles the model with a C++ compiler"
  "python3-dev|build|has_python_headers|torch's Inductor includes Python.h when it compiles"
  "openjdk-17-jre-headless|torchserve|has_java17|TorchServe's frontend runs on Java 17+ (tsvk's own engine needs no Java)"
  "bubblewrap|test|command -v bwrap|tests/helm run the chart's pod spec in a sandbox"
  "hey|test|command -v hey|the load generator of tsvk robustness (overload burst)"
  "curl|test|command -v curl|the chart's archive-download init container, run by tests/helm and the pod sandbox"
  "libjemalloc2|test|has_jemalloc|tests of tsvk serve --allocator jemalloc (optional when serving: glibc's malloc is the default)"
  "prometheus|test|command -v prometheus|tests/helm ask a real Prometheus the chart's dashboard and autoscaling queries"
  "iproute2|test|command -v ss|tests read the bytes a stopped worker has not read (ss -x) to know its batch reached it"
)

wanted=(build)
check_only=
for arg in "$@"; do
  case "$arg" in
    --torchserve) wanted+=(torchserve) ;;
    --test) wanted+=(torchserve test) ;;
    --check) check_only=1 ;;
    *) echo "usage: scripts/system-deps.sh [--torchserve] [--test] [--check]" >&2; exit 2 ;;
  esac
done

missing=()
for entry in "${PACKAGES[@]}"; do
  IFS='|' read -r package needed_by check _why <<<"$entry"
  [[ " ${wanted[*]} " == *" $needed_by "* ]] || continue
  eval "$check" >/dev/null 2>&1 || missing+=("$package")
done
((${#missing[@]})) || exit 0

line="apt-get install -y ${missing[*]}"
if [[ -n "$check_only" ]]; then
  echo "system packages missing: ${missing[*]} (install with: $line)" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null; then
  echo "tsvk needs these system packages, and this machine has no apt-get: ${missing[*]} (the list and why each: scripts/system-deps.sh)" >&2
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
