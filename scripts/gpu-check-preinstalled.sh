#!/bin/bash
# usage: scripts/gpu-check-preinstalled.sh [STEPS ...]: `tsvk gpu-check` with the Python a CUDA machine already has
# (torch with CUDA, torchvision, pytest), where no package registry can be reached and `make gpu-check` cannot build
# its venv. The checkout's two packages are found through links named as setup.cfg's package_dir names them; what
# the machine lacks goes in the folder EXTRA_SITE (TorchServe's Python package and captum, which it imports, for the
# preprocessing baseline). Each STEPS (comma-separated step names) is one gpu-check, so a crash in a CUDA library
# loses that group only; the default runs every step that needs neither TorchServe's Java nor TensorRT.
# OUT: where the reports go (benchmarks/results); BUDGET_S: seconds for all groups together (3600).
cd "$(dirname "$0")/.." || exit 1
root=$PWD
links=$(mktemp -d)
ln -s "$root/handlers/tsvk" "$links/tsvk" && ln -s "$root/tools" "$links/tsvk_tools" || exit 1
export PYTHONPATH="$links:${EXTRA_SITE:+$EXTRA_SITE:}$root" PYTHONUNBUFFERED=1
deadline=$((SECONDS + ${BUDGET_S:-3600}))
[ $# -gt 0 ] || set -- gpu-handler,preprocess-bench gpu-backends archive-aoti-fp32
status=0
for steps in "$@"; do
  left=$((deadline - SECONDS))
  if [ "$left" -lt 20 ]; then echo "gpu-check $steps: not run, ${left} s of BUDGET_S left"; status=1; continue; fi
  timeout -k 10 "$left" "${PYTHON:-python3}" -m tsvk_tools.cli gpu-check --steps "$steps" --output-dir "${OUT:-benchmarks/results}" || status=1
done
rm -r "$links"
exit $status
