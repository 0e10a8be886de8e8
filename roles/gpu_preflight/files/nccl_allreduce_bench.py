#!/usr/bin/env python3
"""All-reduce bus bandwidth with torch.distributed + NCCL, one process per GPU.

Prints one JSON line: {"world_size", "nccl_version", "env", "results": [{bytes, time_us, busbw_gbps}]}.
Bus bandwidth follows nccl-tests: bytes * 2 * (n - 1) / n / time.
"""

from __future__ import annotations

import argparse
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, config: dict, queue) -> None:
    world, sizes, iters, port = config["world"], config["sizes"], config["iters"], config["port"]
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, device_id=rank
    )
    results = []
    for size in sizes:
        tensor = torch.ones(size // 2, dtype=torch.bfloat16, device="cuda")
        for _ in range(5):
            dist.all_reduce(tensor)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(tensor)
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1000 / iters
        busbw = size * 2 * (world - 1) / world / seconds / 1e9
        results.append({"bytes": size, "time_us": round(seconds * 1e6, 1), "busbw_gbps": round(busbw, 1)})
        del tensor
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--world-size", type=int, default=0, help="GPUs to use (0 = all visible)")
    parser.add_argument("--sizes-mib", default="1,64,1024", help="comma-separated message sizes in MiB")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()

    world = args.world_size or torch.cuda.device_count()
    if world < 2:
        raise SystemExit(f"need at least 2 GPUs for an all-reduce test, found {world}")
    sizes = [int(float(mib) * 2**20) for mib in args.sizes_mib.split(",")]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    config = {"world": world, "sizes": sizes, "iters": args.iters, "port": _free_port()}
    mp.spawn(_worker, args=(config, queue), nprocs=world, join=True)
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
    print(
        json.dumps(
            {
                "world_size": world,
                "nccl_version": ".".join(str(p) for p in torch.cuda.nccl.version()),
                "env": env,
                "results": queue.get(),
            }
        )
    )


if __name__ == "__main__":
    main()
