#!/bin/sh
# Run inside the image build after each pip install: records what PyPI's torch build brings for CUDA,
# and on the CPU variant removes what only a GPU process opens (again after a later install brought
# triton back); then `pip check`, tolerating only the complaints named below. Appends to REPORT_FILE.
# Usage: slim-cpu.sh cpu|gpu REPORT_FILE
set -eu
variant="$1"
report="$2"
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

megabytes() { du -sm "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }

{
    echo "variant: $variant"
    echo "site-packages MB before: $(megabytes "$site")"
    echo "CUDA libraries (nvidia/, cuda/) MB: $(megabytes "$site/nvidia" "$site/cuda")"
    echo "triton MB: $(megabytes "$site/triton")"
    echo "cuDNN engine libraries MB: $(megabytes "$site"/nvidia/cudnn/lib/libcudnn_*.so.9)"
} >> "$report"

if [ "$variant" = cpu ]; then
    # triton compiles GPU kernels; torch imports it only when it is present and a GPU asks for it.
    if python -m pip show --quiet triton >/dev/null 2>&1; then python -m pip uninstall --yes --quiet triton; fi
    # libcudnn.so.9 (kept: torch links it) opens these only to run a convolution on a GPU.
    rm -f "$site"/nvidia/cudnn/lib/libcudnn_*.so.9
    echo "removed (cpu): triton, cuDNN engine libraries" >> "$report"
fi
echo "site-packages MB after: $(megabytes "$site")" >> "$report"

# pip check lists each broken requirement on a line. Allowed, and only these: kserve's pins below the
# project's psutil and python-dateutil (why it is installed with --no-deps: requirements-no-deps.txt),
# and on the CPU image the triton it leaves out.
allowed='^kserve [^ ]+ has requirement (psutil|python-dateutil)[^ ]*, but you have [^ ]+ [^ ]+\.$'
if [ "$variant" = cpu ]; then
    allowed="$allowed|^torch [^ ]+ requires triton, which is not installed\.$"
fi
if python -m pip check > /tmp/pip-check.txt 2>&1; then status=0; else status=$?; fi
echo "pip check (exit $status):" >> "$report"
sed 's/^/  /' /tmp/pip-check.txt >> "$report"
unexpected=$(grep -v -E "$allowed" /tmp/pip-check.txt | grep -v -E '^No broken requirements found\.$' || true)
if [ -n "$unexpected" ]; then
    echo "pip check found broken requirements:" >&2
    echo "$unexpected" >&2
    exit 1
fi
cat "$report"
