"""Several nodes of identical GPUs: tensor parallelism stays inside a node, pipeline stages or data-parallel
replicas split the nodes (issue 14). One all-reduce per layer crosses every TP group, so TP goes over the
node's NVLink; a pipeline sends one activation per stage boundary and replicas send nothing to each other,
which the network between nodes carries."""

from __future__ import annotations

from typing import Any

from ._common import MAX_PARALLEL_SIZE, _positive_int

TP_ACROSS_NODES = "TP across nodes would put every all-reduce on the network"


def check_nodes(nodes: Any) -> int:
    """The node count as an int >= 1 (PlanInputError naming ``nodes`` otherwise)."""
    return _positive_int("nodes", nodes, upper=MAX_PARALLEL_SIZE)


def node_problem(*, tp: int, pp: int, dp: int, nodes: int, gpus_per_node: int | None) -> str | None:
    """Why TP x PP x DP cannot be spread over ``nodes`` nodes of ``gpus_per_node`` GPUs (None: it can).

    Rules: TP divides the GPUs of one node; the nodes hold whole pipeline stages of one instance (PP a
    multiple of the node count, DP 1: vLLM's --nnodes) or whole replicas (DP a multiple of it: vLLM's
    --data-parallel-size-local); every node holds the same number of the layout's GPUs. Replicas that span
    some of the nodes are not planned.
    """
    if nodes == 1:
        return None
    if gpus_per_node is not None and gpus_per_node % tp:
        if tp > gpus_per_node:
            return (
                f"tensor_parallel_size {tp} exceeds the {gpus_per_node} GPUs of one node: {TP_ACROSS_NODES}"
            )
        return f"tensor_parallel_size {tp} does not divide the {gpus_per_node} GPUs of one node"
    if dp % nodes and (pp % nodes or dp > 1):
        return (
            f"PP {pp} x DP {dp} gives the {nodes} nodes neither whole pipeline stages of one instance "
            f"(pipeline_parallel_size a multiple of {nodes}, data_parallel_size 1) nor whole replicas "
            f"(data_parallel_size a multiple of {nodes})"
        )
    local = tp * pp * dp // nodes
    if gpus_per_node is not None and local > gpus_per_node:
        return f"the layout needs {local} GPUs on each of the {nodes} nodes, which have {gpus_per_node}"
    return None


def node_split(*, tp: int, pp: int, dp: int, nodes: int) -> dict[str, Any]:
    """How a layout node_problem accepts spreads over the nodes: replicas whole on a node ("data") when DP
    is a multiple of the node count, else whole stages on a node ("pipeline"); GPUs of the layout per node."""
    return {
        "nnodes": nodes,
        "split": "data" if dp % nodes == 0 else "pipeline",
        "local_world_size": tp * pp * dp // nodes,
    }


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def one_node_shortfall(plan: dict[str, Any] | None) -> str:
    """What an instance inside one node holds, or why it does not fit, in its plan's per-GPU figures."""
    if plan is None:
        return "no layout inside one node is valid"
    lay = plan["layout"]
    label = f"TP {lay['tensor_parallel_size']}" + (
        f" x PP {lay['pipeline_parallel_size']}" if lay["pipeline_parallel_size"] > 1 else ""
    )
    weights, usable, kv = (
        plan["weights_gib_per_gpu"],
        plan["requested_memory_gib"],
        plan["kv_cache_gib_per_gpu"],
    )
    if plan["fits"]:
        return (
            f"inside one node {label} holds only {plan['max_concurrency']}x requests of "
            f"{plan['max_model_len']:,} tokens per replica ({kv:.1f} GiB {plan['kv_cache_dtype']} KV per GPU)"
        )
    if weights >= usable:
        return f"weights need {weights:.1f} GiB per GPU at {label} alone (> {usable:.1f} GiB usable)"
    if kv <= 0:
        return (
            f"at {label} alone the weights take {weights:.1f} of the {usable:.1f} GiB usable per GPU and "
            f"leave no room for the KV cache ({kv:.1f} GiB)"
        )
    why = plan["reasons"][0] if plan["reasons"] else "too few KV tokens"
    return f"at {label} alone the weights take {weights:.1f} of the {usable:.1f} GiB usable per GPU: {why}"


def multinode_why(
    split: dict[str, Any],
    *,
    tp: int,
    pp: int,
    dp: int,
    interconnect: str = "nvlink",
    lead: str | None = None,
    weights_gib: float | None = None,
) -> str:
    """One sentence: why the nodes are split this way. ``lead`` opens it (for a pipeline split: why no
    instance inside one node will do); without it a data split says the model fits one node, with the
    replica's ``weights_gib`` per GPU when given."""
    nodes = split["nnodes"]
    if split["split"] == "data":
        if lead is None:
            size = f": {weights_gib:.1f} GiB weights per GPU" if weights_gib is not None else ""
            lead = f"the model fits one node (TP {tp} x PP {pp}{size})"
        replicas = _count(dp // nodes, "replica")
        return f"{lead}: DP {dp} puts {replicas} on each node, with no traffic between nodes"
    inside = "inside each node's NVLink" if interconnect == "nvlink" else "inside each node"
    return (
        f"{lead or 'no instance inside one node fits'}: PP {pp} puts {_count(pp // nodes, 'stage')} "
        f"on each node, TP {tp} stays {inside}; {TP_ACROSS_NODES}"
    )
