#!/usr/bin/env python3
"""Run SGLang's OpenAI-compatible server with the API key from the environment, never from argv.

Usage: python sglang_serve.py [OPTIONS...]   (the options of `python -m sglang.launch_server`)

SGLang 0.5.17 takes its API key only as --api-key (sglang/srt/server_args.py; it reads no environment
variable for it), and anything on a command line is readable by every local user in /proc/PID/cmdline and
lands in the journal. The sglang_service role writes the key to the 0640 environment file as
LLMDEPLOY_API_KEY; this adds `--api-key KEY` to sys.argv inside this process only (the kernel's copy of
the command line, /proc/PID/cmdline, is not changed by that) and then runs the module sglang.launch_server
as `python -m sglang.launch_server` does (runpy, as __main__).

SGLang logs its whole ServerArgs once at start, in this main process (`server_args=ServerArgs(...
api_key='...')`, sglang/srt/entrypoints/engine.py): the key is replaced by <redacted> in every log record
of this process. The worker processes multiprocessing spawns re-run sglang.launch_server (not this file)
as __mp_main__ and get the arguments through a pipe, not a command line.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys
from collections.abc import Callable, Mapping, Sequence

KEY_ENV = "LLMDEPLOY_API_KEY"
SECRET_FLAGS = ("--api-key", "--admin-api-key")
REDACTED = "<redacted>"
USAGE = "usage: sglang_serve.py [python -m sglang.launch_server options]"


class ShimError(Exception):
    """A command line the shim refuses (exit status 2, like argparse)."""


def build_argv(args: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The options SGLang gets: ``args`` plus ``--api-key`` from the environment when it is set."""
    for word in args:
        flag = word.split("=", 1)[0]
        if flag in SECRET_FLAGS:
            # The value is the secret: show the flag only.
            raise ShimError(
                f"sglang_serve.py: {flag} on the command line is refused (it would be readable in "
                f"/proc/PID/cmdline); the API key comes from {KEY_ENV} in the service's environment file"
            )
    key = environ.get(KEY_ENV, "")
    if not key:
        return list(args)
    if key != key.strip() or any(ord(char) < 0x20 or ord(char) == 0x7F for char in key):
        raise ShimError(f"sglang_serve.py: {KEY_ENV} holds whitespace or control characters")
    return [*args, "--api-key", key]


def install_redaction(secret: str) -> None:
    """Replace ``secret`` in every log record's message from now on (this process)."""
    if not secret:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's to report (when it is emitted), not ours
            return record
        if secret in message:
            record.msg = message.replace(secret, REDACTED)
            record.args = None
        return record

    logging.setLogRecordFactory(factory)


def run_launch_server(argv: list[str]) -> None:
    """What `python -m sglang.launch_server ARGS` does, with ``argv`` as its sys.argv[1:]."""
    sys.argv = ["sglang.launch_server", *argv]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)


def main(
    args: Sequence[str],
    environ: Mapping[str, str],
    runner: Callable[[list[str]], None] = run_launch_server,
) -> int:
    try:
        argv = build_argv(args, environ)
    except ShimError as exc:
        print(f"{exc}\n{USAGE}", file=sys.stderr)
        return 2
    install_redaction(environ.get(KEY_ENV, ""))
    runner(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
