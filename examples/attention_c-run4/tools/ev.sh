#!/bin/sh
# Operator wrapper: one avo-eval (args passed on), load average and steal ticks (/proc/stat, 10 ms) before and after, the table from its log.
R=${R:-/work/wt/attc4/runs/attention_c-20261202-021812}
st() { awk '/^cpu /{print $9}' /proc/stat; }
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) steal $(st) threads=${AVO_ATTENTION_C_THREADS:-1} $*" | tee -a /tmp/attc4-tools/ev.log
"$R/avo-eval" "$@" 2>&1 | tail -4 | tee -a /tmp/attc4-tools/ev.log
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) steal $(st)" | tee -a /tmp/attc4-tools/ev.log
/work/wt/attc4/.venv/bin/python /work/wt/attc4/examples/attention_c-run3/tools/table.py $R | tee -a /tmp/attc4-tools/ev.log
