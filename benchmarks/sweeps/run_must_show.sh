#!/bin/bash
# must-show sweeps for issue 10, run one after another on a quiet machine
# run from anywhere; results go to $1 (default results/must-show)
R=${1:-results/must-show}
rm -rf $R; mkdir -p $R
run() { name=$1; shift; echo "=== $name: satpoint sweep $* ($(date +%T))" >> $R/index.log; /usr/bin/time -f "$name wall %e s" -a -o $R/index.log satpoint sweep "$@" --out $R/$name > $R/$name.log 2>&1; echo "exit $?" >> $R/index.log; }
run workers --set workers=0,1,2,4
run batching --set max_batch_size=1,8,32 --max-batch-time 0.01
run mlp --demo-model digits-mlp --set runtime=sklearn,onnx --set env.OMP_NUM_THREADS=1,2
run straight --set workers=0,1
echo "=== resumed: interrupted at 150 s then --resume ($(date +%T))" >> $R/index.log
timeout -s INT 150 satpoint sweep --set workers=0,1 --out $R/resumed > $R/resumed-1.log 2>&1; echo "first part exit $?" >> $R/index.log
/usr/bin/time -f "resume wall %e s" -a -o $R/index.log satpoint sweep --resume $R/resumed > $R/resumed-2.log 2>&1; echo "exit $?" >> $R/index.log
echo "done $(date +%T)" >> $R/index.log
