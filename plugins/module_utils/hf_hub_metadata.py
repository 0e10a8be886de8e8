"""What the planner needs from a model repository on a Hugging Face hub (or an HF-protocol mirror).

Standard library only, so `bin/llm-plan --model ORG/NAME[@REV]` runs with a bare python3: the revision is
resolved to its commit sha, config.json (and ModelOpt's hf_quant_config.json, when present) is read at that
sha, and the weight files' sizes come from the listing, or from a HEAD request per file where the server's
listing has no sizes. The token comes from HF_TOKEN or the file HF_TOKEN_PATH names, never from argv.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

DEFAULT_ENDPOINT = "https://huggingface.co"
REPO_RE = re.compile(
    r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*)(?:@(?P<rev>[^\s@]+))?$"
)
# vLLM loads safetensors when a repository has them, else PyTorch .bin files; GGUF is its own route.
WEIGHT_KINDS = ((".safetensors",), (".bin", ".pt", ".pth"), (".gguf",))


class HubError(Exception):
    """A refusal with its fix, printed as the CLI's error (exit 2)."""


def parse_model_spec(spec: str) -> tuple[str, str]:
    """'org/name' or 'org/name@revision' -> (repo, revision)."""
    m = REPO_RE.match(spec.strip())
    if not m:
        raise HubError(f"{spec!r} is not ORG/NAME or ORG/NAME@REVISION (e.g. Qwen/Qwen3-14B@main)")
    return m["repo"], m["rev"] or "main"


def weight_files(files: Mapping[str, int | None]) -> dict[str, int | None]:
    """The files vLLM would load: safetensors if any, else PyTorch files, else GGUF (top level or not)."""
    for suffixes in WEIGHT_KINDS:
        chosen = {name: size for name, size in files.items() if name.endswith(suffixes)}
        if chosen:
            return dict(sorted(chosen.items()))
    return {}


# llama.cpp's split naming (<stem>-00001-of-00010.gguf); hf_files.py groups parts the same way on the host
# side, where Ansible is importable (this module must stay standard-library only for bin/llm-plan).
_GGUF_PART = re.compile(r"^(?P<stem>.+)-\d{5}-of-\d{5}\.gguf$")


def gguf_models(names: list[str]) -> list[str]:
    """The GGUF models a file list holds: split parts count once (as their merged name), vision projectors
    (mmproj-*) not at all."""
    found = set()
    for name in names:
        head, _, base = name.rpartition("/")
        if not base.endswith(".gguf") or base.startswith("mmproj"):
            continue
        m = _GGUF_PART.match(base)
        found.add(f"{head}/{m['stem']}.gguf" if head and m else f"{m['stem']}.gguf" if m else name)
    return sorted(found)


def allowed(name: str, patterns: list[str] | None) -> bool:
    """huggingface_hub's allow_patterns: fnmatch on the repository path; no patterns allow everything."""
    return not patterns or any(fnmatch.fnmatch(name, p) for p in patterns)


def token_from_env(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    if env.get("HF_TOKEN"):
        return env["HF_TOKEN"].strip()
    path = env.get("HF_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface", "token")
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return ""


class _Client:
    def __init__(self, endpoint: str, token: str, timeout: float) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout

    def request(self, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(self.endpoint + path, headers=self.headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, dict(resp.headers), resp.read() if method == "GET" else b""
        except urllib.error.HTTPError as exc:
            headers = dict(exc.headers or {})
            if {k.lower(): v for k, v in headers.items()}.get("x-error-code") == "GatedRepo":
                raise self.gated(path, exc.code) from exc
            return exc.code, headers, exc.read() if method == "GET" else b""
        except (urllib.error.URLError, OSError) as exc:
            raise HubError(f"cannot reach the hub at {self.endpoint}: {exc}") from exc

    def gated(self, path: str, status: int) -> HubError:
        """The hub's answer for a gated repository (HTTP 401/403 with X-Error-Code: GatedRepo)."""
        parts = path.lstrip("/").split("/")
        repo = "/".join(parts[2:4] if parts[0] == "api" else parts[:2])
        who = "the token given has no access to it" if self.headers else "no token was given"
        return HubError(
            f"{repo} is a gated repository and {who} (HTTP {status}): accept its terms at "
            f"{self.endpoint}/{repo} with your account, then give a token of that account: hf_token (an "
            "ansible-vault variable) for the playbooks, HF_TOKEN or HF_TOKEN_PATH for bin/llm-plan"
        )

    def json(self, path: str) -> tuple[int, Any]:
        status, _, body = self.request(path)
        try:
            return status, json.loads(body) if body else None
        except ValueError:
            return status, None


def _refs_hint(client: _Client, repo: str) -> str:
    status, refs = client.json(f"/api/models/{repo}/refs")
    if status != 200 or not isinstance(refs, Mapping):
        return ""
    names = [b.get("name") for b in refs.get("branches", [])] + [t.get("name") for t in refs.get("tags", [])]
    return ", ".join(sorted(str(n) for n in names if n))


def _not_found(client: _Client, repo: str, revision: str, token: str, status: int) -> HubError:
    refs = _refs_hint(client, repo)
    if refs:
        return HubError(
            f"{repo} has no revision {revision!r}; its branches and tags: {refs} (or a commit sha)"
        )
    if token:
        return HubError(
            f"{repo}@{revision}: the hub answered {status} with the token given: the repository does not "
            "exist, or the token has no access to it (request access on the model's page for a gated model)"
        )
    return HubError(
        f"{repo}@{revision}: the hub answered {status}: no such repository, or it is gated or private; for a "
        "gated or private model set HF_TOKEN (or HF_TOKEN_PATH to a file holding it) to a token with access"
    )


def _size(client: _Client, repo: str, sha: str, name: str) -> int | None:
    quoted = urllib.parse.quote(name)
    status, headers, _ = client.request(f"/{repo}/resolve/{sha}/{quoted}", method="HEAD")
    if status >= 400:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    for key in ("x-linked-size", "content-length"):
        if lower.get(key, "").isdigit():
            return int(lower[key])
    return None


def hub_model(
    spec: str,
    endpoint: str = "",
    token: str | None = None,
    timeout: float = 30.0,
    allow_patterns: list[str] | None = None,
) -> dict[str, Any]:
    """Resolve ORG/NAME[@REV] on the hub: sha, config.json, quant config, weight files and their bytes.

    ``allow_patterns`` (fnmatch, as huggingface_hub's) limits the weight files to those the deploy would
    download; a repository of several GGUF models (quantisation variants) must be narrowed to one."""
    repo, revision = parse_model_spec(spec)
    token = token_from_env() if token is None else token
    client = _Client(endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT, token, timeout)
    rev = urllib.parse.quote(revision, safe="")
    status, info = client.json(f"/api/models/{repo}/revision/{rev}?blobs=true")
    if status != 200 or not isinstance(info, Mapping) or not info.get("sha"):
        raise _not_found(client, repo, revision, token, status)
    sha = str(info["sha"])
    listing = {
        str(s["rfilename"]): (int(s["size"]) if isinstance(s.get("size"), int) else None)
        for s in info.get("siblings") or []
        if isinstance(s, Mapping) and s.get("rfilename")
    }
    if "config.json" not in listing:
        gguf = (
            " It holds GGUF files: vLLM serves those with the base model's config (--hf-config-path);"
            " write a catalog entry that names it, as catalog/models/glm5_ud_q4_k_xl_gguf.yml does."
            if gguf_models(list(listing))
            else ""
        )
        raise HubError(f"{repo}@{sha[:12]} has no config.json; the planner needs the model's config.{gguf}")
    status, config = client.json(f"/{repo}/resolve/{sha}/config.json")
    if status != 200 or not isinstance(config, Mapping):
        raise HubError(f"{repo}@{sha[:12]}: config.json could not be read (HTTP {status})")
    quant = None
    if "hf_quant_config.json" in listing:
        status, quant = client.json(f"/{repo}/resolve/{sha}/hf_quant_config.json")
        quant = quant if status == 200 and isinstance(quant, Mapping) else None
    weights = weight_files({name: size for name, size in listing.items() if allowed(name, allow_patterns)})
    if allow_patterns and not weights:
        raise HubError(
            f"{repo}@{sha[:12]}: no weight file matches the allow patterns {list(allow_patterns)} (a catalog "
            f"entry's hf_allow_patterns); the repository's weight files: "
            f"{', '.join(list(weight_files(listing))[:6]) or 'none'}"
        )
    models = gguf_models(list(weights))
    if len(models) > 1 and all(name.endswith(".gguf") for name in weights):
        shown = ", ".join(models[:6]) + (f" and {len(models) - 6} more" if len(models) > 6 else "")
        raise HubError(
            f"{repo}@{sha[:12]} holds {len(models)} GGUF models ({shown}): name one with allow patterns "
            "(a catalog entry's hf_allow_patterns, e.g. ['UD-Q4_K_XL/*']; --allow-pattern for bin/llm-plan)"
        )
    weights = {
        name: size for name, size in weights.items() if not name.rpartition("/")[2].startswith("mmproj")
    }
    sizes = {
        name: size if size is not None else _size(client, repo, sha, name) for name, size in weights.items()
    }
    unknown = sorted(name for name, size in sizes.items() if size is None)
    if unknown:
        raise HubError(f"{repo}@{sha[:12]}: the hub gives no size for {', '.join(unknown[:5])}")
    chat_template = "chat_template.jinja" in listing or "chat_template.json" in listing
    if not chat_template and "tokenizer_config.json" in listing:
        status, tok = client.json(f"/{repo}/resolve/{sha}/tokenizer_config.json")
        chat_template = status == 200 and isinstance(tok, Mapping) and bool(tok.get("chat_template"))
    return {
        "repo": repo,
        "revision": revision,
        "sha": sha,
        "config": dict(config),
        "hf_quant_config": dict(quant) if quant else None,
        "weight_files": sizes,
        "checkpoint_bytes": sum(int(s) for s in sizes.values()),
        "chat_template": chat_template,
        "files": sorted(listing),
    }
