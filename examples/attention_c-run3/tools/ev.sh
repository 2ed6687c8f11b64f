#!/bin/sh
# Operator wrapper: one avo-eval (args passed on), load average before and after, the table from its log.
R=/work/wt/attc3/runs/attention_c-20261201-190613
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) threads=${AVO_ATTENTION_C_THREADS:-1}" | tee -a /tmp/attc3-tools/ev.log
"$R/avo-eval" "$@" 2>&1 | tail -4 | tee -a /tmp/attc3-tools/ev.log
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a /tmp/attc3-tools/ev.log

/work/wt/attc3/.venv/bin/python /tmp/attc3-tools/table.py $R | tee -a /tmp/attc3-tools/ev.log
