"""One model served by a group of hosts (vLLM's multi-node mode): the checks and choices the deploy makes.

Pure functions, fed by the deploy playbook (roles/deploy/tasks/group*.yml):

- ``group_layout``: the group from the play's hosts (the first is the head, node rank 0).
- ``group_input_problems``: deploy inputs set differently on the group's hosts (one model, one engine
  release, one layout: a host with its own value would start a different engine and never join).
- ``group_fact_problems``: hardware and software that differ between the hosts (GPU model and count, driver,
  compute capability; CPU architecture and Python on CPU hosts).
- ``node_network``: the interface and address a node talks to the group on, from ``ip -o route get
  <master address>`` and the node's interface facts (overridable by name).
- ``reach_problem``: what a worker's TCP probe of the head's rendezvous port says.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

# Deploy inputs that must be the same on every host of a group (host_vars may set them per host).
GROUP_INPUTS = (
    "llm_device",
    "llm_model_name",
    "llm_model_repo",
    "llm_model_revision",
    "llm_hardware_name",
    "llm_vllm_version",
    "llm_tensor_parallel_size",
    "llm_max_model_len",
    "llm_served_model_name",
    "llm_engine_args",
    "llm_hf_endpoint",
    "llm_multinode",
    "llm_multinode_master_addr",
    "llm_multinode_master_port",
    "llm_api_key",
)
_SECRETS = ("llm_api_key",)
# gpu_preflight_facts keys that must agree over the group, by device.
GROUP_FACTS = {
    "gpu": (
        ("gpu_name", "GPU model"),
        ("gpu_count", "GPU count"),
        ("driver_version", "NVIDIA driver"),
        ("compute_capability", "compute capability"),
    ),
    "cpu": (("cpu_arch", "CPU architecture"), ("python_version", "Python")),
}
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
UNSET = "<unset>"


class MultinodeError(ValueError):
    """A bad input for the group, naming the deploy variable."""


def group_layout(hosts: list[str], host: str) -> dict[str, Any]:
    """The group of ``hosts`` (the play's, in inventory order) as ``host`` sees it."""
    if not isinstance(hosts, list) or not hosts:
        raise MultinodeError(f"llm_multinode: the play has no hosts ({hosts!r})")
    if host not in hosts:
        raise MultinodeError(f"llm_multinode: {host!r} is not one of the play's hosts {hosts!r}")
    return {"nnodes": len(hosts), "node_rank": hosts.index(host), "head": hosts[0], "hosts": list(hosts)}


def _shown(name: str, value: Any) -> str:
    if value is UNSET:
        return UNSET
    if name in _SECRETS:
        return "<hidden>"
    return json.dumps(value, sort_keys=True, default=str)


def group_input_problems(per_host: dict[str, dict[str, Any]]) -> list[str]:
    """One refusal per input whose value differs between hosts: ``per_host`` maps host -> {name: value}
    (a name a host does not set is absent)."""
    problems = []
    for name in GROUP_INPUTS:
        values = {host: given.get(name, UNSET) for host, given in per_host.items()}
        # Compared by value (secrets too), shown masked.
        if len({json.dumps(v, sort_keys=True, default=str) for v in values.values()}) > 1:
            listed = ", ".join(f"{host}: {_shown(name, v)}" for host, v in values.items())
            problems.append(
                f"{name} differs between the hosts of the group ({listed}): one model is served by "
                "one engine release with one layout, so set it once for the group (group_vars), not per host"
            )
    return problems


def group_fact_problems(per_host: dict[str, dict[str, Any]], device: str) -> list[str]:
    """Hosts whose hardware or software differs from the head's (the first host of ``per_host``)."""
    if device not in GROUP_FACTS:
        raise MultinodeError(f"llm_device must be gpu or cpu, got {device!r}")
    hosts = list(per_host)
    problems = []
    for key, what in GROUP_FACTS[device]:
        values = {h: _fact(per_host[h], key) for h in hosts}
        if len(set(map(str, values.values()))) > 1:
            listed = ", ".join(f"{h}: {v}" for h, v in values.items())
            problems.append(
                f"{what} differs between the hosts of the group ({listed}): vLLM's ranks must run on "
                "the same hardware and software; give the group identical hosts or deploy them separately"
            )
    return problems


def _fact(facts: dict[str, Any], key: str) -> Any:
    if key in facts:
        return facts[key]
    gpus = facts.get("gpus") or []
    if key in ("gpu_name", "compute_capability") and gpus:
        return gpus[0].get("name" if key == "gpu_name" else key)
    return None


def _route_fields(route: str) -> dict[str, str]:
    words = route.split()
    return {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i] in ("dev", "src", "via")}


def node_network(
    master_addr: str,
    route: str,
    interfaces: dict[str, Any],
    ifname: str = "",
) -> dict[str, Any]:
    """The interface and own address a node reaches ``master_addr`` on.

    ``route`` is ``ip -o route get <master_addr>``'s output on the node; ``interfaces`` maps an interface
    name to its ipv4 facts ({"address": ..., ...}, as Ansible's ansible_<ifname>.ipv4). On the head the
    route is local (through lo): the interface is the one that holds the address. ``ifname`` (the inventory's
    llm_multinode_ifname) wins when given; it must exist and carry an IPv4 address.
    """
    try:
        ipaddress.ip_address(master_addr)
    except ValueError as exc:
        raise MultinodeError(f"llm_multinode_master_addr must be an IP address, got {master_addr!r}") from exc
    if ifname:
        if not _IFNAME.match(ifname) or ifname not in interfaces:
            raise MultinodeError(
                f"llm_multinode_ifname={ifname!r} is not an interface of this host (it has "
                f"{', '.join(sorted(interfaces)) or 'none'}): name one of them or leave it empty"
            )
        address = (interfaces[ifname] or {}).get("address")
        if not address:
            raise MultinodeError(f"llm_multinode_ifname={ifname!r} has no IPv4 address on this host")
        return {"ifname": ifname, "address": address, "how": "llm_multinode_ifname"}
    for name, ipv4 in interfaces.items():
        if (ipv4 or {}).get("address") == master_addr:
            return {"ifname": name, "address": master_addr, "how": f"{name} holds {master_addr}"}
    fields = _route_fields(route)
    dev, src = fields.get("dev"), fields.get("src")
    if not dev or dev == "lo" or not src:
        raise MultinodeError(
            f"no route from this host to llm_multinode_master_addr={master_addr} (ip route get said "
            f"{route.strip()!r}): set llm_multinode_master_addr to the head's address on the network the "
            "nodes share, or llm_multinode_ifname"
        )
    via = f" via {fields['via']}" if "via" in fields else ""
    return {"ifname": dev, "address": src, "how": f"route to {master_addr}{via} leaves through {dev}"}


def reach_problem(result: str, host: str, master_addr: str, port: int) -> str | None:
    """A worker's TCP probe of the head's port: ``open`` and ``refused`` mean the packets get through (nothing
    listens before the deploy starts the head); ``timeout`` or ``unreachable`` mean they do not."""
    if result in ("open", "refused"):
        return None
    return (
        f"{host} cannot reach the head at {master_addr}:{port} ({result}): open TCP {port} and the engine's "
        "other ports (README: firewall) between the nodes, or set llm_multinode_master_addr to an address "
        "the nodes reach each other on"
    )
