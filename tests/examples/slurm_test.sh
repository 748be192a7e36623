#!/usr/bin/env bash
# A real scheduler: a one-node Slurm cluster (tests/examples/slurm_cluster.sh)
# runs examples/slurm/ddp_fashion_mnist.sbatch on 2 tasks, and the job
# trains exactly as `mpirun -np 2` does (same checkpoint, same metrics, same
# RESULT). Then a job is sent SIGTERM mid-epoch (scancel --signal=TERM) and
# requeued, and its second run resumes from the checkpoint to exactly where
# an uninterrupted run ends. Skipped, saying why, where the cluster cannot
# run (not root, no Slurm or munge, daemons that do not start).
set -euo pipefail
here=$(dirname "$0")
source "$here/expect.sh"
source "$here/slurm_cluster.sh"
ddp=$(realpath "$1") sbatch_script=$(realpath "$2") same_state=$(realpath "$3")
cd "${TEST_TMPDIR:-$(mktemp -d)}"
slurm_available || skip_test "$SLURM_WHY"
[ "$(nproc)" -ge 2 ] || skip_test "cannot run a 2-task job here: $(nproc) CPU"
slurm_up || skip_test "the one-node Slurm cluster did not start: $SLURM_WHY"
export TMPDIR=/tmp  # Open MPI's session sockets need a short path
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One thread per rank under both launchers: another thread count sums in
# another order. The job gets it from --cpus-per-task=1 in the script.
export OMP_NUM_THREADS=1
export LOOM_DDP_FASHION_MNIST=$ddp   # sbatch passes the environment to the job
result() { grep '^RESULT ' "$1" | tail -n 1 | sed 's/"samples_per_s": [^,]*, "seconds": [^,]*, //'; }

# 1. The same run under mpirun and as a batch job: the same training state.
tiny=(--epochs 1 --max-steps-per-epoch 5 --batch-size 64 --width 4 --workers 1)
mpirun -np 2 --oversubscribe --bind-to none "$ddp" "${tiny[@]}" --checkpoint mpirun.st --metrics mpirun.csv \
  > mpirun.log 2>&1 || { cat mpirun.log; exit 1; }
job=$(sbatch --parsable "$sbatch_script" "${tiny[@]}") || { echo "FAIL: sbatch refused the script"; exit 1; }
out=ddp_fashion_mnist.$job.out
slurm_wait_done "$job" 240 || { cat "$out"; exit 1; }
[ "$(slurm_job_state "$job")" = COMPLETED ] || { echo "FAIL: the job $(slurm_job_state "$job")"; cat "$out"; exit 1; }
grep -q "^job $job, run 1: 2 tasks on " "$out" || { echo "FAIL: the job did not run on 2 tasks"; cat "$out"; exit 1; }
grep -q '^RESULT {"example": "ddp_fashion_mnist".*"ranks": 2}' "$out" || { echo "FAIL: no RESULT line"; cat "$out"; exit 1; }
[ "$(result "$out")" = "$(result mpirun.log)" ] || { echo "FAIL: the job's RESULT differs from mpirun's"; result "$out"; \
  result mpirun.log; exit 1; }
python3 "$same_state" mpirun.st "ddp_fashion_mnist.$job.safetensors" mpirun.csv "ddp_fashion_mnist.$job.csv" \
  || { echo "FAIL: the batch job trained differently from mpirun"; exit 1; }

# 2. SIGTERM mid-training, then a requeue. An example that handles the signal
# checkpoints the step and exits 75, and the script requeues the job itself;
# one that does not is killed, and the job is requeued by hand: it goes on
# from its last epoch's checkpoint. Either way it ends where the straight run
# does. The signal is sent once epoch 1's metrics row is in the job's CSV
# file (the rank writes it itself; Slurm forwards the job's printed lines
# through srun, which on a loaded machine fell 400 steps behind), and must
# land before the last step (a stop after it completes the run; in CI on
# 2026-11-29 it arrived 150 steps of 5 ms after the printed step 2xx of
# epoch 2, and the job completed). Epoch 2's 400 steps of a width-16 net
# (~15 ms each here) leave the signal 6 s.
two=(--epochs 2 --max-steps-per-epoch 400 --batch-size 64 --width 16 --workers 1 --log-every 1)
mpirun -np 2 --oversubscribe --bind-to none "$ddp" "${two[@]}" --checkpoint straight.st --metrics straight.csv \
  > straight.log 2>&1 || { cat straight.log; exit 1; }
job=$(sbatch --parsable "$sbatch_script" "${two[@]}")
out=ddp_fashion_mnist.$job.out metrics=ddp_fashion_mnist.$job.csv
epoch_1_done() { grep -qs '^1,' "$metrics"; }
for _ in $(seq 1800); do epoch_1_done && break; sleep 0.1; done
epoch_1_done || { echo "FAIL: the job did not finish epoch 1"; cat "$out"; exit 1; }
scancel --signal=TERM "$job" || { echo "FAIL: scancel"; cat "$out"; exit 1; }
# Back in the queue (the script requeued it) or failed (killed).
slurm_wait_state "$job" "PENDING|FAILED|COMPLETED" 120 || { cat "$out"; exit 1; }
[ "$(slurm_job_state "$job")" != COMPLETED ] || { echo "FAIL: the job trained on after SIGTERM"; cat "$out"; exit 1; }
taken_after=$(grep -c '^step ' "$out")   # the last step run before it stopped
how="stopped by SIGTERM with a checkpoint, requeued by the script"
if [ "$(slurm_job_state "$job")" = FAILED ]; then
  how="killed by SIGTERM, requeued by scontrol"
  scontrol requeue "$job" || { echo "FAIL: scontrol requeue"; scontrol show job "$job"; cat "$out"; exit 1; }
fi
# It starts again once its old credentials expire (cred_expire, 20 s here).
slurm_wait_state "$job" "PENDING|RUNNING" 60 || { echo "FAIL: the job is not requeued ($how)"; cat "$out"; exit 1; }
slurm_wait_done "$job" 240 || { cat "$out"; exit 1; }
[ "$(slurm_job_state "$job")" = COMPLETED ] || { echo "FAIL: the requeued job $(slurm_job_state "$job")"; cat "$out"; exit 1; }
grep -q "^job $job, run 2: 2 tasks on .* --resume$" "$out" && grep -q "^resumed from ddp_fashion_mnist.$job.safetensors" \
  "$out" || { echo "FAIL: the requeued job did not resume ($how)"; cat "$out"; exit 1; }
[ "$(result "$out")" = "$(result straight.log)" ] || { echo "FAIL: the resumed job's RESULT differs"; result "$out"; \
  result straight.log; exit 1; }
python3 "$same_state" straight.st "ddp_fashion_mnist.$job.safetensors" straight.csv "ddp_fashion_mnist.$job.csv" \
  || { echo "FAIL: the requeued job ended elsewhere than the straight run ($how)"; cat "$out"; exit 1; }
echo "PASS ($(sinfo -V): the job matched mpirun; SIGTERM sent after epoch 1, taken after step $taken_after;" \
  "$how, it resumed exactly)"
