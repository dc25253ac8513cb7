#!/usr/bin/env python3
"""ckpt.dcp.Writer/Reader against DCP's FileSystemWriter/Reader, in one run.

    .venv/bin/python bench/bench_dcp_io.py [--mib N] [--runs R] [--quick]

Two ranks (gloo, on this machine) hold a state dict of N MiB in all
(default 1024; --quick: 64 MiB, 3 runs): 8 float32 matrices as DTensors
sharded over the ranks (Shard(0)). R rounds (default 5) of every
operation below; within a round the ckpt and dcp variants of an operation
run back to back and which goes first rotates from round to round, so a
burst of load from the machine's other users falls on both:
  save         dcp.save(sd) with the writer: DCP's FileSystemWriter
               (torch.save zips, fsync per file, .metadata renamed without
               a directory fsync: sync_files=True, DCP's default); ckpt's
               Writer (safetensors with XXH3 digests through the atomic
               commit: temp, fsync, rename, directory fsync; each file
               dropped from the page cache and verified from disk before
               its rank reports; .metadata atomic after all); ckpt's
               Writer(serialization="torch_save") (DCP's own layout, which
               plain dcp.load reads; also verified from disk)
  load         dcp.load into the sharded template (2 ranks)
  load 2->1    rank 0 alone (no_dist) loads the whole state into full
               tensors: each chunk lands in a block of the target
  verify       the commit's verification alone: each rank's
               ckpt.dcp.verify_file of its file (page cache dropped first)
Outputs are removed and os.sync() called between rounds. Prints, per
operation, the median wall seconds (rank 0, between barriers) and the
median CPU seconds of both ranks together, MiB/s, and the ratios ckpt/dcp
(the issue's goal: at most 1.3x for save and for load) and verification's
share of ckpt's save. Nothing here asserts a time; the machine may be
shared (say so with the numbers). Needs torch 2 (the project's .venv)."""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))

OPS = ("dcp save", "ckpt save", "ckpt save torch_save", "dcp load", "ckpt load",
       "dcp load 2->1", "ckpt load 2->1", "verify")


def rank_main(rank, world, mib, runs, tmp, q):
    import warnings
    warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    import ckpt.dcp
    dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "rdzv"),
                            rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    rows = mib * (1 << 20) // 4 // 8 // 1024
    g = torch.Generator().manual_seed(0)
    full = {"m%d" % i: torch.randn(rows, 1024, generator=g) for i in range(8)}
    sd = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full.items()}
    if rank != 0:
        full = None
    tmpl = {k: v.clone().zero_() for k, v in sd.items()}
    whole = {k: torch.zeros_like(v) for k, v in full.items()} if rank == 0 else None
    wall = {k: [] for k in OPS}
    cpu = {k: [] for k in OPS}

    def timed(name, fn, only_rank0=False):
        dist.barrier()
        c, t = time.process_time(), time.perf_counter()
        if not only_rank0 or rank == 0:
            fn()
        dist.barrier()
        w = time.perf_counter() - t
        spent = torch.tensor([time.process_time() - c], dtype=torch.float64)
        dist.all_reduce(spent)
        wall[name].append(w)
        cpu[name].append(float(spent))

    def check(got, want):
        assert all(torch.equal(got[k], want[k]) for k in want), "loaded state differs"

    for run in range(runs):
        d = {n: os.path.join(tmp, n) for n in ("dcp", "ckpt", "ckpt_ts")}
        groups = [
            [("dcp save", lambda: dcp.save(sd, storage_writer=dcp.FileSystemWriter(d["dcp"]))),
             ("ckpt save", lambda: dcp.save(sd, storage_writer=ckpt.dcp.Writer(d["ckpt"]))),
             ("ckpt save torch_save", lambda: dcp.save(sd, storage_writer=ckpt.dcp.Writer(
                 d["ckpt_ts"], serialization="torch_save")))],
            [("dcp load", lambda: dcp.load(tmpl, storage_reader=dcp.FileSystemReader(d["dcp"]))),
             ("ckpt load", lambda: dcp.load(tmpl, storage_reader=ckpt.dcp.Reader(d["ckpt"])))],
            [("dcp load 2->1", lambda: dcp.load(
                whole, storage_reader=dcp.FileSystemReader(d["dcp"]), no_dist=True)),
             ("ckpt load 2->1", lambda: dcp.load(
                 whole, storage_reader=ckpt.dcp.Reader(d["ckpt"]), no_dist=True))],
        ]
        for group in groups:
            shift = run % len(group)
            for name, fn in group[shift:] + group[:shift]:
                timed(name, fn, only_rank0="2->1" in name)
                if name.endswith("load"):
                    check({k: v.to_local() for k, v in tmpl.items()},
                          {k: v.to_local() for k, v in sd.items()})
                    for v in tmpl.values():
                        v.to_local().zero_()
                elif "2->1" in name and rank == 0:
                    check(whole, full)
                    for v in whole.values():
                        v.zero_()
        timed("verify", lambda: ckpt.dcp.verify_file(
            os.path.join(d["ckpt"], "__%d_0.distcp" % rank)))
        dist.barrier()
        if rank == 0:
            for p in d.values():
                shutil.rmtree(p)
            os.sync()
        dist.barrier()
    if rank == 0:
        q.put({k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in OPS})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.mib, a.runs = 64, 3
    import torch.multiprocessing as mp
    tmp = tempfile.mkdtemp(prefix="ckpt-bench-dcp-", dir="/tmp")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    try:
        mp.start_processes(rank_main, args=(2, a.mib, a.runs, tmp, q), nprocs=2,
                           start_method="spawn")
        med = q.get()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("2 ranks, %d MiB in all, median of %d interleaved runs (wall: rank 0 between "
          "barriers; cpu: both ranks)" % (a.mib, a.runs))
    for k in OPS:
        w, c = med[k]
        print("  %-22s wall %7.3f s  cpu %7.3f s  %8.0f MiB/s" % (k, w, c, a.mib / w if w else 0))

    def ratio(x, y):
        return "%.2fx wall, %.2fx cpu" % (med[x][0] / med[y][0], med[x][1] / med[y][1])
    print("ratios ckpt/dcp (goal <= 1.3x):")
    print("  save (verified durable commit)   %s" % ratio("ckpt save", "dcp save"))
    print("  save torch_save layout           %s" % ratio("ckpt save torch_save", "dcp save"))
    print("  load (every chunk's digest)      %s" % ratio("ckpt load", "dcp load"))
    print("  load with resharding 2->1        %s" % ratio("ckpt load 2->1", "dcp load 2->1"))
    print("verification: %.0f%% of ckpt save's wall time, %.0f%% of its cpu time" % (
        100 * med["verify"][0] / med["ckpt save"][0], 100 * med["verify"][1] / med["ckpt save"][1]))


if __name__ == "__main__":
    main()
