"""Writes DCP directories with torch.distributed.checkpoint itself, for the
C reader's tests (tests/dcp/test_c_*.py) and bench/bench_dcp.py.

    python dcp_gen.py single DIR [safetensors]
    python dcp_gen.py sharded DIR [safetensors]   (2 gloo ranks, DTensor)
    python dcp_gen.py sharded-both DIR   (DIR/torch_save and DIR/safetensors)
    python dcp_gen.py big DIR torch_save|safetensors MIB   (one process)
"""
import os
import sys
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import SerializationFormat

warnings.filterwarnings("ignore")


def writer(path, fmt):
    kind = SerializationFormat.SAFETENSORS if fmt == "safetensors" else SerializationFormat.TORCH_SAVE
    return FileSystemWriter(path, serialization_format=kind)


def single(path, fmt):
    g = torch.Generator().manual_seed(0)
    sd = {
        "model": {
            "w": torch.randn(5, 7, generator=g),
            "b": torch.randn(7, generator=g).to(torch.bfloat16),
            "wt": torch.randn(4, 3, generator=g).t(),  # non-contiguous (torch.save format)
            "i": torch.arange(6, dtype=torch.int32).reshape(2, 3),
            "empty": torch.zeros(0, 3),
        },
        "step": 7,
        "extra": {"lr": 0.1, "name": "x"},
        "scalar": torch.tensor(3.5, dtype=torch.float64),
    }
    # an optimizer: int-keyed state (DCP's unflatten makes it a list) and
    # param_groups of lists and tuples
    lin = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(lin.parameters(), lr=0.01)
    lin(torch.ones(1, 3)).sum().backward()
    opt.step()
    sd["optim"] = opt.state_dict()
    if fmt == "safetensors":  # safetensors refuses non-contiguous tensors
        sd["model"]["wt"] = sd["model"]["wt"].contiguous()
    dcp.save(sd, storage_writer=writer(path, fmt))


def rank_main(rank, world, targets, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(1)
    full0 = torch.randn(7, 5, generator=g)  # uneven Shard(0)
    full1 = torch.randn(3, 6, generator=g)  # Shard(1)
    rep = torch.arange(10, dtype=torch.int64)
    sd = {
        "w0": distribute_tensor(full0, mesh, [Shard(0)]),
        "w1": distribute_tensor(full1, mesh, [Shard(1)]),
        "rep": distribute_tensor(rep, mesh, [Replicate()]),
        "plain": torch.ones(2, 2) * 5,
        "meta": {"epoch": 3, "tag": "run"},
    }
    for path, fmt in targets:
        dcp.save(sd, storage_writer=writer(path, fmt))
    dist.barrier()
    dist.destroy_process_group()


def sharded(targets, world=2):
    """targets: [(dir, format)], all written by one group of `world` ranks."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(world, targets, port), nprocs=world, join=True)


def big(path, fmt, mib):
    """One process, ~mib MiB of float32 tensors (bench)."""
    n = mib * (1 << 20) // 4 // 16
    sd = {f"layer{i}.weight": torch.randn(n // 1024, 1024) for i in range(16)}
    dcp.save(sd, storage_writer=writer(path, fmt))


if __name__ == "__main__":
    kind, path = sys.argv[1], sys.argv[2]
    fmt = sys.argv[3] if len(sys.argv) > 3 else "torch_save"
    if kind == "single":
        single(path, fmt)
    elif kind == "sharded":
        sharded([(path, fmt)])
    elif kind == "sharded-both":  # one process group, PATH/torch_save and PATH/safetensors
        sharded([(os.path.join(path, f), f) for f in ("torch_save", "safetensors")])
    elif kind == "big":
        big(path, fmt, int(sys.argv[4]))
    else:
        sys.exit("usage: dcp_gen.py single|sharded|big DIR [safetensors|torch_save] [MiB]")
