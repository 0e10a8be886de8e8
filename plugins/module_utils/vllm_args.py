"""Build vLLM's command line from data, and quote it for systemd.

Pure functions: the vllm_service role passes its variables in and renders the result into the unit's
ExecStart and EnvironmentFile. Secrets are refused here so they can never reach argv or the unit.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

_OPTION = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_SECRET_OPTIONS = frozenset({"api-key", "hf-token"})
_SECRET_HINT = "secrets go in the environment file: set vllm_service_api_key / vllm_service_hf_token"
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@+=:,./-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _err(name: str, message: str, value: Any) -> AnsibleFilterError:
    shown = repr(value)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    return AnsibleFilterError(f"{name}: {message} (got {shown})")


def _scalar(option: str, value: Any, plugin: str) -> str:
    if isinstance(value, bool):
        raise _err(plugin, f"option {option!r}: a boolean inside a list has no command-line form", value)
    if isinstance(value, int | float | str):
        return str(value)
    raise _err(plugin, f"option {option!r}: expected a string, a number, a list or a mapping", value)


def option_words(option: str, value: Any, plugin: str = "vllm_args") -> list[str]:
    """One option's words in the argparse style vLLM and SGLang share: nothing for None/False, the bare flag
    for True, compact JSON for a mapping, the flag and each item for a list, else the flag and the value.
    ``plugin`` names the filter in error messages."""
    flag = f"--{option}"
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, Mapping):
        return [flag, json.dumps(dict(value), separators=(",", ":"), sort_keys=True)]
    if isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            return []
        return [flag, *(_scalar(option, item, plugin) for item in value)]
    return [flag, _scalar(option, value, plugin)]


def _check_raw_secret(raw: str) -> None:
    if not raw.startswith("--"):
        return
    option = raw[2:].split("=", 1)[0].replace("_", "-")
    if option in _SECRET_OPTIONS:
        # The value is the secret: the message shows the option only.
        flag = raw.split("=", 1)[0]
        shown = f"{flag}=<hidden>" if "=" in raw else flag
        raise _err("vllm_args", f"{flag} would put a secret in argv; {_SECRET_HINT}", shown)


def vllm_args(options: Mapping[str, Any], extra: Sequence[str] | None = None) -> list[str]:
    """Return the argument list for the options (in mapping order) followed by the raw extra words."""
    if not isinstance(options, Mapping):
        raise _err("vllm_args", "expected a mapping of option names to values", options)
    words: list[str] = []
    for key, value in options.items():
        if not isinstance(key, str) or not _OPTION.match(key):
            raise _err("vllm_args", "option names are lower-case words with - or _ (no leading --)", key)
        option = key.replace("_", "-")
        if option in _SECRET_OPTIONS:
            raise _err("vllm_args", f"option {option!r} would put a secret in argv; {_SECRET_HINT}", key)
        words.extend(option_words(option, value))
    if extra is None:
        extra = []
    if isinstance(extra, str) or not isinstance(extra, Sequence):
        raise _err("vllm_args", "extra arguments must be a list of strings", extra)
    for raw in extra:
        if not isinstance(raw, str):
            raise _err("vllm_args", "extra arguments must be a list of strings", raw)
        _check_raw_secret(raw)
        words.append(raw)
    return words


def _quote_exec_word(word: str) -> str:
    # systemd expands %-specifiers and $VARIABLES in ExecStart= words, quoted or not; double them.
    escaped = word.replace("%", "%%").replace("$", "$$")
    if word and _SAFE_WORD.match(word):
        return escaped
    escaped = escaped.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def systemd_exec_args(argv: Sequence[str]) -> str:
    """Return argv as one ExecStart= command line (first item: the absolute path of the program)."""
    if isinstance(argv, str) or not isinstance(argv, Sequence) or not argv:
        raise _err("systemd_exec_args", "expected a non-empty list of strings", argv)
    if not all(isinstance(word, str) for word in argv):
        raise _err("systemd_exec_args", "every argument must be a string", argv)
    if not argv[0].startswith("/"):
        raise _err("systemd_exec_args", "the program must be an absolute path", argv[0])
    return " ".join(_quote_exec_word(word) for word in argv)


def systemd_env_value(value: Any) -> str:
    """Return value double-quoted for an EnvironmentFile= line (systemd unescapes \\ \" $ ` there)."""
    if isinstance(value, bool):
        value = "1" if value else "0"
    if not isinstance(value, str | int | float):
        raise _err("systemd_env_value", "expected a string or number", value)
    text = str(value)
    if "\n" in text or "\r" in text:
        raise _err("systemd_env_value", "an environment value cannot span lines", "<multi-line value>")
    for char in ("\\", '"', "$", "`"):
        text = text.replace(char, "\\" + char)
    return f'"{text}"'


def systemd_env_name(name: Any) -> str:
    """Return name when it is a valid environment variable name."""
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise _err("systemd_env_name", "an environment variable name is letters, digits and _", name)
    return name
