#!/usr/bin/env bash
# mpirun for shardcast's CPU backend inside containers and CI: every rank on this machine over
# shared memory (btl self,vader), more ranks than cores allowed, root allowed when running as root.
# Usage: scripts/mpirun.sh -np 2 build/bin/shardcast run PLAN --backend cpu ...
set -euo pipefail
args=(--oversubscribe --mca btl self,vader --bind-to none)
if [[ $(id -u) == 0 ]]; then args+=(--allow-run-as-root); fi
# Cross-memory attach needs ptrace rights that containers usually withhold: copy through the segment.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# No InfiniBand / UCX probing on a single machine (silences warnings, speeds start-up).
export OMPI_MCA_pml=ob1
# A rank waiting in MPI yields the core instead of spinning on it (ranks share cores here).
export OMPI_MCA_mpi_yield_when_idle=1
# Ranks' stderr is a pipe to mpirun even on a terminal: tell them whether ours is one (progress bars).
if [[ -t 2 ]]; then export SHARDCAST_STDERR_IS_TTY=1; else export SHARDCAST_STDERR_IS_TTY=0; fi
exec mpirun "${args[@]}" "$@"
