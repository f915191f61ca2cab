#!/bin/bash
# usage: scripts/batch-worker-memory.sh ARCHIVE OUTPUT.jsonl: runs tsvk batch on 40 of the bench photos (.tsvk/bench/images,
# written by `tsvk bench`) and prints each worker's peak resident memory (VmHWM), read every half second
archive=$1; out=$2; rm -rf $out $out.batch
for i in $(seq 1 40); do echo $(ls ./.tsvk/bench/images/$((i % 3))-*.jpg); done > "$out.inputs.txt"
.venv/bin/tsvk batch --archive $archive --input "$out.inputs.txt" --output $out --batch 8 --quiet &
pid=$!; declare -A peak
while kill -0 $pid 2>/dev/null; do
  for w in $(pgrep -P $pid); do v=$(awk '/VmHWM/{print $2}' /proc/$w/status 2>/dev/null); [ -n "$v" ] && peak[$w]=$v; done; sleep 0.5
done
for w in "${!peak[@]}"; do echo "worker $w peak RSS $((${peak[$w]}/1024)) MiB"; done
