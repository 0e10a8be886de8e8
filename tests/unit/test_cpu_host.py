"""CPU hosts: probe parsing, refusals and the CPU build's plan (module_utils/cpu_host.py, cpu_plan.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
import _collection  # noqa: E402  (tests/unit is on sys.path under pytest: rootdir-relative import)
import cpu_host  # noqa: E402
import cpu_plan  # noqa: E402

TINY = yaml.safe_load((ROOT / "catalog" / "models" / "tiny_test.yml").read_text())["llm_model"]
GIB = 2**30
MEMINFO = "MemTotal:       24000000 kB\nMemAvailable:   16000000 kB\n"
DF = "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/sda1 {size} 0 {avail} 1% {mount}\n"


def _ok(stdout: str) -> dict:
    return {"rc": 0, "stdout": stdout, "stderr": ""}


def probes(**over: dict) -> dict:
    base = {
        "meminfo": _ok(MEMINFO),
        "df": _ok(DF.format(size=500 * GIB, avail=200 * GIB, mount="/")),
        "nofile": _ok("1048576\n1048576\n"),
        "python": _ok("Python 3.11.2\n"),
        "tcp": _ok(""),
        "service_user": {"rc": 2, "stdout": "", "stderr": ""},
        "uname_m": _ok("x86_64\n"),
        "cpuinfo": _ok("flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16\n"),
        "cpus_allowed": _ok("Cpus_allowed_list:\t0-3\n"),
        "shm": _ok(DF.format(size=GIB, avail=GIB, mount="/dev/shm")),
    }
    base.update(over)
    return base


def checks(facts: dict, **req: object) -> list[str]:
    return [p["check"] for p in cpu_host.cpu_preflight_problems(facts, {"tensor_parallel_size": 1, **req})]


def test_cpu_list_and_flags() -> None:
    assert cpu_host.cpu_list("Cpus_allowed_list:\t0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert cpu_host.cpu_list("5") == [5]
    with pytest.raises(AnsibleFilterError, match="cpu_host_cpu_list"):
        cpu_host.cpu_list("0-x")
    assert cpu_host.cpu_flags("processor: 0\nflags : b a avx2\n") == ["a", "avx2", "b"]
    assert cpu_host.cpu_flags("Features\t: fp asimd evtstrm\n") == ["asimd", "evtstrm", "fp"]


@pytest.mark.parametrize(
    ("cpus", "tp", "binding"),
    [
        ([0, 1], 1, ""),
        ([0, 1], 2, "0|1"),
        ([0, 1, 2, 3, 4, 5, 6, 7], 2, "0-3|4-7"),
        ([2, 3, 8, 9], 2, "2-3|8-9"),
    ],
)
def test_thread_binding(cpus: list[int], tp: int, binding: str) -> None:
    assert cpu_host.thread_binding(cpus, tp) == binding


def test_thread_binding_needs_a_core_per_worker() -> None:
    with pytest.raises(AnsibleFilterError, match="2 workers need at least 2 CPUs"):
        cpu_host.thread_binding([0], 2)


def test_a_good_host_passes() -> None:
    facts = cpu_host.cpu_facts_from_probes(probes())
    assert facts["device"] == "cpu" and facts["cpus"] == [0, 1, 2, 3] and facts["cpu_arch"] == "x86_64"
    assert facts["shm"]["avail_bytes"] == GIB
    assert (
        checks(facts, tensor_parallel_size=2, required_memory_bytes=8 * GIB, min_shm_bytes=512 * 2**20) == []
    )


@pytest.mark.parametrize(
    ("over", "req", "expected"),
    [
        ({"cpus_allowed": _ok("Cpus_allowed_list:\t0\n")}, {"tensor_parallel_size": 2}, "cpu_cores"),
        ({}, {"required_memory_bytes": 40 * GIB}, "cpu_memory"),
        (
            {"shm": _ok(DF.format(size=64 * 2**20, avail=60 * 2**20, mount="/dev/shm"))},
            {"min_shm_bytes": 2**29},
            "shm_size",
        ),
        ({"cpuinfo": _ok("flags : fpu sse2 avx\n")}, {}, "cpu_isa"),
        ({"uname_m": _ok("riscv64\n")}, {}, "cpu_arch"),
        ({"python": _ok("Python 3.9.18\n")}, {}, "python_version"),
        ({}, {"quant_format": "nvfp4"}, "cpu_quant_format"),
        (
            {"df": _ok(DF.format(size=GIB, avail=GIB // 2, mount="/"))},
            {"required_disk_bytes": GIB},
            "disk_space",
        ),
        (
            {
                "tcp": _ok(
                    "  0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 1\n"
                )
            },
            {},
            "port_in_use",
        ),
    ],
)
def test_each_refusal(over: dict, req: dict, expected: str) -> None:
    facts = cpu_host.cpu_facts_from_probes(probes(**over), port=8000)
    found = cpu_host.cpu_preflight_problems(facts, {"tensor_parallel_size": 1, **req})
    errors = [p for p in found if p["severity"] == "error"]
    assert [p["check"] for p in errors] == [expected]
    assert errors[0]["fix"] and errors[0]["fact"] in errors[0]["message"]


def test_no_avx512_is_only_a_warning() -> None:
    facts = cpu_host.cpu_facts_from_probes(probes(cpuinfo=_ok("flags : avx2 fma\n")))
    found = cpu_host.cpu_preflight_problems(facts, {})
    assert [(p["check"], p["severity"]) for p in found] == [("cpu_isa_slow", "warning")]


def test_nvfp4_refusal_names_the_variable_and_the_way_out() -> None:
    facts = cpu_host.cpu_facts_from_probes(probes())
    (problem,) = cpu_host.cpu_preflight_problems(facts, {"quant_format": "NVFP4"})
    assert "llm_model.quant_format" in problem["message"] and "llm_device: gpu" in problem["fix"]


def test_gguf_is_refused_on_the_cpu_build_with_the_plugins_reason() -> None:
    facts = cpu_host.cpu_facts_from_probes(probes())
    (problem,) = cpu_host.cpu_preflight_problems(facts, {"quant_format": "gguf"})
    assert "vllm-gguf-plugin" in problem["fix"] and "CUDA-only" in problem["fix"]
    # The CPU build is no longer offered GGUF as a format it can run.
    assert "GGUF" not in problem["requirement"]


def test_gpu_facts_are_refused() -> None:
    with pytest.raises(AnsibleFilterError, match="expected CPU facts"):
        cpu_host.cpu_preflight_problems({"driver_present": True}, {})


def test_cpu_plan_tiny_model_tokens_follow_the_kv_space() -> None:
    one = cpu_plan.cpu_plan(TINY, tensor_parallel_size=1, kv_cache_gib=1, memory_available_bytes=16 * GIB)
    # 2 layers x 2 KV heads x 64 x (K, V) x 2 bytes = 1024 bytes per token: 1 GiB holds 2^20 tokens.
    assert one["plan"]["kv_cache_tokens"] == 2**20 and one["fits"]
    two = cpu_plan.cpu_plan(
        TINY, tensor_parallel_size=2, kv_cache_gib=1, memory_available_bytes=16 * GIB, cpus=[0, 1]
    )
    # Each worker holds one of the two KV heads.
    assert two["plan"]["kv_cache_tokens"] == 2**21
    assert two["engine_env"] == {"VLLM_CPU_KVCACHE_SPACE": 1, "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    assert two["gpu_memory_utilization"] is None and two["data_parallel_size"] == 1
    assert two["max_model_len"] == 256 and two["min_shm_bytes"] > 0
    assert two["required_memory_bytes"] == TINY["checkpoint_bytes"] + 2 * GIB + 2 * GIB


def test_cpu_plan_auto_kv_uses_live_memory() -> None:
    small = cpu_plan.cpu_plan(TINY, memory_available_bytes=6 * GIB)
    large = cpu_plan.cpu_plan(TINY, memory_available_bytes=100 * GIB)
    assert small["cpu_kv_cache_gib"] == 1 and large["cpu_kv_cache_gib"] == 48
    assert large["plan"]["kv_cache_tokens"] == 48 * 2**20


def test_cpu_plan_refuses_what_does_not_fit() -> None:
    tight = cpu_plan.cpu_plan(TINY, kv_cache_gib=8, memory_available_bytes=6 * GIB)
    assert not tight["fits"] and "available on the host" in tight["reasons"][0]
    with pytest.raises(cpu_plan.CpuPlanError, match="llm_tensor_parallel_size"):
        cpu_plan.cpu_plan(TINY, tensor_parallel_size=0)
    with pytest.raises(cpu_plan.CpuPlanError, match="llm_cpu_kv_cache_gib"):
        cpu_plan.cpu_plan(TINY, kv_cache_gib="lots")


def test_filter_names() -> None:
    assert set(_collection.filters("cpu_host")) == {
        "cpu_host_facts_from_probes",
        "cpu_host_preflight_problems",
        "cpu_host_thread_binding",
        "llm_cpu_plan",
        "llm_cpu_plan_lines",
    }


def test_cpu_plan_over_two_hosts_puts_half_the_workers_and_weights_on_each() -> None:
    one = cpu_plan.cpu_plan(
        TINY, tensor_parallel_size=2, kv_cache_gib=1, memory_available_bytes=16 * GIB, cpus=[0, 1]
    )
    two = cpu_plan.cpu_plan(
        TINY, tensor_parallel_size=2, kv_cache_gib=1, memory_available_bytes=16 * GIB, cpus=[0, 1], nnodes=2
    )
    assert (one["local_workers"], two["local_workers"]) == (2, 1)
    assert one["engine_env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    # The one worker of a host in a group is bound to all of the host's CPUs, not left to vLLM's NUMA count.
    assert two["engine_env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert two["required_memory_bytes"] < one["required_memory_bytes"]
    assert two["min_shm_bytes"] == one["min_shm_bytes"] // 2
    # The KV tokens are the group's, the same wherever the workers run.
    assert two["plan"]["kv_cache_tokens"] == one["plan"]["kv_cache_tokens"] == 2**21
    assert any("2 hosts: 1 of the 2 TP workers" in r for r in two["reasons"])
    with pytest.raises(cpu_plan.CpuPlanError, match="cannot be spread evenly over 2 hosts"):
        cpu_plan.cpu_plan(TINY, tensor_parallel_size=3, kv_cache_gib=1, nnodes=2)
