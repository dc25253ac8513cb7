#!/usr/bin/env python3
"""ckpt.dcp.Writer/Reader against DCP's FileSystemWriter/Reader, in one run.

    .venv/bin/python bench/bench_dcp_io.py [--mib N] [--runs R] [--quick]

Two ranks (gloo, on this machine) hold a state dict of N MiB in all
(default 1024; --quick: 64 MiB, 2 runs): 8 float32 matrices as DTensors
sharded over the ranks (Shard(0)). R rounds (default 3) of, alternating (which of a pair goes first
alternates too):
  dcp save     dcp.save(sd, storage_writer=FileSystemWriter(d)): torch.save
               zips, fsync per file, .metadata renamed without a directory
               fsync (sync_files=True, DCP's default)
  ckpt save    dcp.save(sd, storage_writer=ckpt.dcp.Writer(d)): safetensors
               with XXH3 digests through the atomic commit (temp, fsync,
               rename, directory fsync), each file dropped from the page
               cache and verified from disk, .metadata atomic after all
  dcp load     dcp.load into a sharded template, FileSystemReader
  ckpt load    the same with ckpt.dcp.Reader (every chunk's digest checked)
  verify       what the commit's verification costs alone: each rank's
               ckpt.dcp.verify_file of its file (page cache dropped)
Outputs are removed and os.sync() called between runs. Prints median
seconds (wall, rank 0, between barriers), MiB/s and the ratios ckpt/dcp.
The issue's goal: ckpt save at most 1.3x dcp save. Nothing here asserts a
time; the machine may be shared (medians of alternating runs).
Needs torch 2 (the project's .venv)."""
import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))


def rank_main(rank, world, port, mib, runs, tmp, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    import ckpt.dcp
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    rows = mib * (1 << 20) // 4 // 8 // 1024
    g = torch.Generator().manual_seed(0)
    sd = {"m%d" % i: distribute_tensor(torch.randn(rows, 1024, generator=g), mesh, [Shard(0)])
          for i in range(8)}
    tmpl = {k: v.clone().zero_() for k, v in sd.items()}
    times = {k: [] for k in ("dcp save", "ckpt save", "dcp load", "ckpt load", "verify")}

    def timed(name, fn):
        dist.barrier()
        t = time.perf_counter()
        fn()
        dist.barrier()
        times[name].append(time.perf_counter() - t)

    for run in range(runs):
        d1, d2 = os.path.join(tmp, "dcp"), os.path.join(tmp, "ckpt")
        saves = [("dcp save", lambda: dcp.save(sd, storage_writer=dcp.FileSystemWriter(d1))),
                 ("ckpt save", lambda: dcp.save(sd, storage_writer=ckpt.dcp.Writer(d2)))]
        loads = [("dcp load", lambda: dcp.load(tmpl, storage_reader=dcp.FileSystemReader(d1))),
                 ("ckpt load", lambda: dcp.load(tmpl, storage_reader=ckpt.dcp.Reader(d2)))]
        for pair in (saves, loads):  # alternating which goes first
            for name, fn in (pair if run % 2 == 0 else pair[::-1]):
                timed(name, fn)
        assert all(torch.equal(tmpl[k].to_local(), sd[k].to_local()) for k in sd)
        timed("verify", lambda: ckpt.dcp.verify_file(os.path.join(d2, "__%d_0.distcp" % rank)))
        dist.barrier()
        if rank == 0:
            shutil.rmtree(d1)
            shutil.rmtree(d2)
            os.sync()
        dist.barrier()
    if rank == 0:
        q.put({k: statistics.median(v) for k, v in times.items()})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.mib, a.runs = 64, 2
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp = tempfile.mkdtemp(prefix="ckpt-bench-dcp-", dir="/tmp")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    try:
        mp.start_processes(rank_main, args=(2, port, a.mib, a.runs, tmp, q), nprocs=2,
                           start_method="spawn")
        med = q.get()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("2 ranks, %d MiB in all, median of %d runs" % (a.mib, a.runs))
    for k, v in med.items():
        print("  %-10s %7.3f s  %8.0f MiB/s" % (k, v, a.mib / v if v else 0))
    print("ratios: save ckpt/dcp %.2fx (goal <= 1.3x), load ckpt/dcp %.2fx, "
          "verification %.0f%% of ckpt save" % (
              med["ckpt save"] / med["dcp save"], med["ckpt load"] / med["dcp load"],
              100 * med["verify"] / med["ckpt save"]))


if __name__ == "__main__":
    main()
