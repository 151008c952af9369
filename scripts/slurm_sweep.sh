#!/bin/bash
# Run a flowsim sweep as a Slurm array job, then merge the shards in a dependent job.
#
#   sbatch --array=0-63 scripts/slurm_sweep.sh scripts/sweeps/bandwidth_split.yml results/bw
#
# Each array task runs one deterministic shard of the grid (flowsim reads SLURM_ARRAY_TASK_ID
# and SLURM_ARRAY_TASK_COUNT) and writes results/bw/shard-IIIII-of-NNNNN.nc atomically; a
# task that is rerun skips a shard already written. The last command queues the merge, which
# checks that every shard is there (and lists the missing ones) before writing
# results/bw.nc.
#SBATCH --job-name=flowsim-sweep
#SBATCH --cpus-per-task=4
#SBATCH --time=01:00:00
#SBATCH --output=flowsim-%A_%a.out
set -euo pipefail
SPEC=${1:?usage: sbatch --array=0-N scripts/slurm_sweep.sh SPEC OUTDIR}
OUT=${2:?usage: sbatch --array=0-N scripts/slurm_sweep.sh SPEC OUTDIR}

python -c "import flowsim; flowsim.warmup()"   # load compiled kernels before timing starts
flowsim sweep "$SPEC" -o "$OUT" --jobs "${SLURM_CPUS_PER_TASK:-1}" --no-progress

# the first task queues the merge after the whole array has finished
if [ "${SLURM_ARRAY_TASK_ID}" = "${SLURM_ARRAY_TASK_MIN:-0}" ]; then
  # quote OUT for the shell that runs --wrap (a quote or $ in the path stays literal)
  printf -v MERGE 'flowsim merge %q -o %q' "$OUT" "$OUT.nc"
  sbatch --dependency="afterok:${SLURM_ARRAY_JOB_ID}" --job-name=flowsim-merge \
         --wrap="$MERGE"
fi
