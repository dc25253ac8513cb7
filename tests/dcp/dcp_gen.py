"""Writes DCP directories with torch.distributed.checkpoint itself, for the
C reader's tests (tests/dcp/test_c_*.py) and bench/bench_dcp.py.

    python dcp_gen.py single DIR [safetensors]
    python dcp_gen.py sharded DIR [safetensors]   (2 gloo ranks, DTensor)
    python dcp_gen.py sharded-both DIR   (2 gloo ranks, one process group:
        DIR/torch_save and DIR/safetensors; with use_collectives=False
        DIR/nocoll/ranks and its collective twin DIR/nocoll/twin;
        HuggingFaceStorageWriter's layouts: DIR/hf/rank0 (rank 0's full
        state dict, fqn_to_index_mapping, an index), DIR/hf/one (no
        mapping), DIR/hf/dist (save_distributed, no consolidation) and
        DIR/hf/cons (consolidated; its shards in DIR/hf/cons/sharded))
    python dcp_gen.py big DIR torch_save|safetensors MIB   (one process)
    python dcp_gen.py threads DIR N   (one process, N writer threads: N data
        files in DIR/torch_save and in DIR/safetensors)
    python dcp_gen.py odd DIR   (one process: DIR/plain (0-d, empty, nested
        lists and dicts, bytes items), DIR/async (dcp.async_save), DIR/zlib
        (a compressing stream extension, as ZStandard is one), DIR/nocoll
        (use_collectives=False: __0.metadata))
"""
import io
import os
import shutil
import sys
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import SerializationFormat

import dcp_ranks  # noqa: E402 (this directory)

warnings.filterwarnings("ignore")


def writer(path, fmt, threads=1):
    kind = SerializationFormat.SAFETENSORS if fmt == "safetensors" else SerializationFormat.TORCH_SAVE
    return FileSystemWriter(path, serialization_format=kind, thread_count=threads)


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


def rank_main(rank, world, targets, store, extra=None):
    # a file rendezvous: a TCP port found free can be taken before rank 0
    # binds it by another test's gloo connection
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
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
        "st": _sharded_tensor(rank, world),
    }
    for path, fmt in targets:
        dcp.save(sd, storage_writer=writer(path, fmt))
    if extra:
        nocoll_ranks(world, os.path.join(extra, "nocoll"))
        hf_ranks(world, rank, os.path.join(extra, "hf"))
    dist.barrier()
    dcp_ranks.leave(0)


def _sharded_tensor(rank, world):
    """A ShardedTensor (the pre-DTensor API) of 5 rows split unevenly: rank
    r holds rows [3r, 3r + 3) clipped (3 and 2 rows on 2 ranks)."""
    from torch.distributed._shard.metadata import ShardMetadata
    from torch.distributed._shard.sharded_tensor import Shard as Piece
    from torch.distributed._shard.sharded_tensor import init_from_local_shards

    full = torch.arange(20, dtype=torch.float64).reshape(5, 4)
    lo, hi = min(3 * rank, 5), min(3 * rank + 3, 5)
    meta = ShardMetadata([lo, 0], [hi - lo, 4], f"rank:{rank}/cpu")
    return init_from_local_shards([Piece(full[lo:hi].clone(), meta)], [5, 4])


def sharded(targets, world=2, extra=None):
    """targets: [(dir, format)], all written by one group of `world` ranks;
    with `extra`, the no-collective and Hugging Face layouts under it."""
    import tempfile
    import uuid

    import torch.multiprocessing as mp

    # a rank of torch's gloo group can still die outside this code on a
    # loaded machine: the inputs are made again, from nothing, up to 3 times
    for attempt in range(3):
        store = os.path.join(tempfile.gettempdir(), "ckpt-rdzv-" + uuid.uuid4().hex)
        try:
            mp.spawn(rank_main, args=(world, targets, store, extra), nprocs=world, join=True)
            return
        except mp.ProcessExitedException as e:
            if attempt == 2:
                raise
            print("dcp_gen.py: a rank died (%s); making the inputs again" % e, file=sys.stderr)
            for path, _ in targets:
                shutil.rmtree(path, ignore_errors=True)
            if extra:
                for sub in ("nocoll", "hf"):
                    shutil.rmtree(os.path.join(extra, sub), ignore_errors=True)
        finally:
            if os.path.exists(store):
                os.unlink(store)


def _sharded_sd(world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(1)
    full0 = torch.randn(7, 5, generator=g)  # uneven Shard(0)
    full1 = torch.randn(3, 6, generator=g)  # Shard(1)
    full2 = torch.randn(1, 3, generator=g)  # Shard(0) leaving rank 1 empty
    return {
        "w0": distribute_tensor(full0, mesh, [Shard(0)]),
        "w1": distribute_tensor(full1, mesh, [Shard(1)]),
        "w2": distribute_tensor(full2, mesh, [Shard(0)]),
        "rep": distribute_tensor(torch.arange(10, dtype=torch.int64), mesh, [Replicate()]),
        "plain": torch.ones(2, 2) * 5,
        "meta": {"epoch": 3, "tag": "run", "lst": [1, torch.tensor(2.5)]},
    }


def nocoll_ranks(world, path):
    sd = _sharded_sd(world)
    dcp.save(sd, checkpoint_id=os.path.join(path, "ranks"), use_collectives=False)
    dcp.save(sd, checkpoint_id=os.path.join(path, "twin"))


def hf_ranks(world, rank, path):
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    sd = _sharded_sd(world)
    tensors = {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}
    full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in tensors.items()}
    mapping = {"w0": 1, "w1": 1, "w2": 2, "rep": 2, "plain": 2}
    if rank == 0:  # rank-0 checkpointing of the full state dict
        dcp.save(full, storage_writer=HuggingFaceStorageWriter(
            os.path.join(path, "rank0"), fqn_to_index_mapping=mapping), no_dist=True)
        dcp.save(full, storage_writer=HuggingFaceStorageWriter(os.path.join(path, "one")),
                 no_dist=True)
    dist.barrier()
    dcp.save(tensors, storage_writer=HuggingFaceStorageWriter(
        os.path.join(path, "dist"), save_distributed=True))
    # consolidation takes torch.finfo of every dtype: integer tensors fail
    floats = {k: v for k, v in tensors.items() if v.dtype.is_floating_point}
    dcp.save(floats, storage_writer=HuggingFaceStorageWriter(
        os.path.join(path, "cons"), save_distributed=True, enable_consolidation=True,
        fqn_to_index_mapping={k: i for k, i in mapping.items() if k in floats}))


def odd(path):
    g = torch.Generator().manual_seed(3)
    sd = {
        "zero_d": torch.tensor(1.25),
        "empty": torch.zeros(0, 4, dtype=torch.int16),
        "empty3": torch.ones(2, 0, 3),
        "nested": {"l": [torch.randn(2, generator=g), {"deep": torch.arange(3)}, [7, "s"]],
                   "t": (torch.ones(1), 2)},
        "blob": b"raw-bytes",
        "obj": {"set": [1, 2], "none": None},
    }
    dcp.save(sd, checkpoint_id=os.path.join(path, "plain"))
    dcp.save({"a": torch.randn(3, 4, generator=g), "n": {"b": torch.arange(5), "s": 1},
              "l": [torch.zeros(2), "x"]},
             checkpoint_id=os.path.join(path, "nocoll"), use_collectives=False)
    fut = dcp.async_save({"a": torch.randn(4, 3, generator=g), "step": 5},
                         checkpoint_id=os.path.join(path, "async"))
    fut.result()
    dcp.save({"w": torch.randn(8, 8, generator=g), "step": 3}, storage_writer=FileSystemWriter(
        os.path.join(path, "zlib"), _extensions=[_zlib_extension()]))


def _zlib_extension():
    """A stream transform (compression) as DCP's ZStandard extension is one:
    its descriptor goes into every _StorageInfo's transform_descriptors.
    (ZStandard itself needs the zstandard module, which .venv lacks.)"""
    import zlib

    from torch.distributed.checkpoint._extension import StreamTransformExtension

    class Zlib(StreamTransformExtension):
        @staticmethod
        def registry_name():
            return "stream.zlib"

        @staticmethod
        def from_descriptor(version):
            return Zlib()

        def get_descriptor(self):
            return "stream.zlib/1"

        def transform_to(self, output):
            class W(io.RawIOBase):
                def __init__(self):
                    self.c = zlib.compressobj()

                def writable(self):
                    return True

                def write(self, b):
                    output.write(self.c.compress(bytes(b)))
                    return len(b)

                def close(self):
                    if not self.closed:
                        output.write(self.c.flush())
                    super().close()
            return W()

        def transform_from(self, input):
            return io.BytesIO(zlib.decompress(input.read()))

    return Zlib()


def threads(path, n):
    """One process, the same state dict in both formats, each written by n
    writer threads: n data files (__0_0.distcp ... __0_{n-1}.distcp), so
    n safetensors parts in PATH/safetensors (PATH/torch_save: its twin)."""
    g = torch.Generator().manual_seed(1)
    sd = {f"layers.{i}.{k}": torch.randn(i % 5 + 1, 3, generator=g).to(dt)
          for i in range(8 * n) for k, dt in (("w", torch.float32), ("b", torch.bfloat16))}
    sd["step"] = 3
    for fmt in ("torch_save", "safetensors"):
        dcp.save(sd, storage_writer=writer(os.path.join(path, fmt), fmt, n))


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
        sharded([(os.path.join(path, f), f) for f in ("torch_save", "safetensors")], extra=path)
    elif kind == "odd":
        odd(path)
    elif kind == "threads":
        threads(path, int(sys.argv[3]))
    elif kind == "big":
        big(path, fmt, int(sys.argv[4]))
    else:
        sys.exit("usage: dcp_gen.py single|sharded|sharded-both|odd|big|threads DIR "
                 "[safetensors|torch_save|N] [MiB]")
