"""Build SGLang's command line (``python -m sglang.launch_server`` options) from data.

Pure functions: the sglang_service role passes the options it owns (built from its variables) and the
user's ``sglang_service_extra_args`` mapping, and renders the result into the service's argv. Option names
are SGLang 0.5.17's (``sglang/srt/server_args.py``): ``--model-path``, ``--tp-size``, ``--kv-cache-dtype``
... ``_`` and ``-`` are the same.

Rules: ``None`` and ``False`` leave an option out, ``True`` is a bare flag (SGLang's booleans are
``store_true``), a list gives the flag followed by each item (``nargs='+'``), a mapping gives the flag
followed by its compact JSON (``--json-model-override-args``, ``--cuda-graph-config``). Options that carry
secrets are refused everywhere (the API key reaches SGLang through the environment file and the
sglang_serve.py shim, never argv), and the extra mapping may not set an option the role owns, under its own
name or one of SGLang's aliases.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from .vllm_args import option_words
except ImportError:  # loaded as a plain file (tests, scripts)
    from vllm_args import option_words

_PLUGIN = "sglang_args"
_OPTION = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
# --api-key and --admin-api-key are SGLang's; SGLang 0.5.17 has no --hf-token, but a token in argv is
# refused all the same (it would be in /proc/PID/cmdline and the journal).
SECRET_OPTIONS = frozenset({"api-key", "admin-api-key", "hf-token"})
_SECRET_HINT = (
    "secrets never go on the command line: set sglang_service_api_key / sglang_service_hf_token, which "
    "reach SGLang through the 0640 environment file"
)
# SGLang 0.5.17's aliases of options the role sets (server_args.py: Arg(aliases=[...])) and the deprecated
# spellings that write the same field (ServerArgs.add_cli_args).
ALIASES: Mapping[str, str] = {
    "model": "model-path",
    "tensor-parallel-size": "tp-size",
    "data-parallel-size": "dp-size",
    "disable-cuda-graph": "cuda-graph-backend-decode",
}


def _err(message: str, value: Any) -> AnsibleFilterError:
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    return AnsibleFilterError(f"{_PLUGIN}: {message} (got {shown})")


def _name(key: Any, where: str) -> str:
    if not isinstance(key, str) or not _OPTION.match(key):
        raise _err(f"{where}: option names are lower-case words with - or _ (no leading --)", key)
    option = key.replace("_", "-")
    if option in SECRET_OPTIONS:
        raise _err(f"{where}: option {option!r} would put a secret in argv; {_SECRET_HINT}", key)
    return option


def _words(option: str, value: Any) -> list[str]:
    return option_words(option, value, _PLUGIN)


def sglang_args(
    options: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    reserved: Iterable[str] = (),
) -> list[str]:
    """Return the argv of ``options`` (in mapping order) followed by ``extra`` (in its order).

    Every key of ``options`` is role-owned, whatever its value; ``reserved`` names more options the extra
    mapping may not set. A key of ``extra`` that is role-owned, reserved, an alias of either, or a secret
    is refused.
    """
    if not isinstance(options, Mapping):
        raise _err("expected a mapping of option names to values", options)
    if extra is None:
        extra = {}
    if not isinstance(extra, Mapping):
        raise _err("the extra options must be a mapping of SGLang option names to values", extra)
    if isinstance(reserved, str) or not isinstance(reserved, Iterable):
        raise _err("reserved must be a list of option names", reserved)
    words: list[str] = []
    owned: set[str] = set()
    for key, value in options.items():
        option = _name(key, "role option")
        owned.add(option)
        words.extend(_words(option, value))
    owned.update(_name(key, "reserved option") for key in reserved)
    for key, value in extra.items():
        option = _name(key, "extra option")
        target = ALIASES.get(option, option)
        if option in owned or target in owned:
            shown = option if target == option else f"{option} (SGLang's alias of {target})"
            raise _err(
                f"extra option {shown} is set by the role from its own variable; use that variable instead",
                key,
            )
        words.extend(_words(option, value))
    return words
