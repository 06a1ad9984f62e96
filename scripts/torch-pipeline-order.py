#!/usr/bin/env python3
"""Prints torch.distributed.pipelining's own action order for ScheduleInterleaved1F1B, one line per
pipeline rank, as shardcast's core::pipelineRankSchedule must reproduce it
(tests/simulator/pipeline_interleaved_test.cpp holds these lines as its expected values).

For each (pp, stages per rank, micro-batches) it runs torch's own passes on a schedule object built
without process groups: _calculate_single_rank_operations (the compute actions),
_add_unshard_reshard (FSDP's UNSHARD / RESHARD, max_active_stages 3) and _add_reduce_grad
(REDUCE_GRAD after a stage's last backward), and prints the actions without the None padding and
without WAIT_REDUCE_GRAD (which always follows its REDUCE_GRAD).

  VENV/bin/python scripts/torch-pipeline-order.py 2,2,4 4,2,8 2,4,4

VENV: scripts/validate-memory.py --setup (torch); a validation tool, not a test dependency.
"""
import argparse

from torch.distributed.pipelining import schedules


def rank_actions(pp: int, v: int, m: int, rank: int) -> list[str]:
    s = schedules.ScheduleInterleaved1F1B.__new__(schedules.ScheduleInterleaved1F1B)
    s.pp_group_size, s.n_local_stages, s._n_microbatches = pp, v, m
    s.number_of_rounds = max(1, m // pp)
    s.microbatches_per_round = m // s.number_of_rounds
    if m % s.number_of_rounds:
        raise SystemExit(f"pp {pp}, {m} micro-batches: not a multiple of its {s.number_of_rounds} rounds")
    ops = s._calculate_single_rank_operations(rank)
    ops = schedules._add_unshard_reshard(ops, max_active_stages=3)
    ops = schedules._add_reduce_grad(ops, m)
    return [str(a) for a in ops if a is not None and "WAIT_REDUCE_GRAD" not in str(a)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="+", help="PP,V,M: pipeline ranks, stages per rank, micro-batches")
    a = ap.parse_args()
    for case in a.cases:
        pp, v, m = (int(x) for x in case.split(","))
        for rank in range(pp):
            print(f"pp {pp} x {v} stages, {m} micro-batches, rank {rank}: " + " ".join(rank_actions(pp, v, m, rank)))


if __name__ == "__main__":
    main()
