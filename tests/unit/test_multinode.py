"""Multi-node groups: the deploy's group checks (module_utils/multinode.py) and the head's watchdog
(roles/vllm_service/files/vllm_watchdog.py) against a real HTTP server on loopback."""

from __future__ import annotations

import http.server
import importlib.util
import json
import socket
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "roles" / "vllm_service" / "files"
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
sys.path.insert(0, str(FILES))

import multinode as mn  # noqa: E402 - module_utils is put on sys.path above

_spec = importlib.util.spec_from_file_location("vllm_watchdog", FILES / "vllm_watchdog.py")
watchdog = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(watchdog)

IFACES = {
    "lo": {"address": "127.0.0.1"},
    "eth0": {"address": "10.89.77.11"},
    "ib0": {"address": "192.168.9.11"},
}


def test_group_layout_puts_the_first_host_at_rank_0() -> None:
    assert mn.group_layout(["a", "b", "c"], "c") == {
        "nnodes": 3,
        "node_rank": 2,
        "head": "a",
        "hosts": ["a", "b", "c"],
    }
    with pytest.raises(mn.MultinodeError, match="not one of the play's hosts"):
        mn.group_layout(["a"], "z")


def test_inputs_set_per_host_are_refused_naming_hosts_and_values() -> None:
    per_host = {
        "a": {"llm_vllm_version": "0.33.0", "llm_api_key": "k1"},
        "b": {"llm_vllm_version": "0.22.0", "llm_api_key": "k2"},
    }
    problems = mn.group_input_problems(per_host)
    assert len(problems) == 2
    assert 'llm_vllm_version differs between the hosts of the group (a: "0.33.0", b: "0.22.0")' in problems[0]
    # A secret is named, never shown.
    assert problems[1].startswith("llm_api_key differs")
    assert "k1" not in problems[1] and "<hidden>" in problems[1]
    same = {"a": {"llm_vllm_version": "0.33.0"}, "b": {"llm_vllm_version": "0.33.0"}}
    assert mn.group_input_problems(same) == []
    unset = {"a": {"llm_tensor_parallel_size": 2}, "b": {}}
    assert "b: <unset>" in mn.group_input_problems(unset)[0]


def test_fact_problems_compare_gpus_drivers_and_cpu_hosts() -> None:
    h200 = {
        "gpu_count": 8,
        "driver_version": "580.159.04",
        "gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0"}],
    }
    other_driver = dict(h200, driver_version="570.86.15")
    assert mn.group_fact_problems({"a": h200, "b": h200}, "gpu") == []
    (problem,) = mn.group_fact_problems({"a": h200, "b": other_driver}, "gpu")
    assert problem.startswith("NVIDIA driver differs") and "b: 570.86.15" in problem
    cpu = {"cpu_arch": "x86_64", "python_version": "3.11.2"}
    assert (
        "Python differs"
        in mn.group_fact_problems({"a": cpu, "b": dict(cpu, python_version="3.12.1")}, "cpu")[0]
    )


def test_node_network_from_the_route_or_the_head_address() -> None:
    route = "10.89.77.10 dev eth0 src 10.89.77.11 uid 0 \\    cache "
    assert mn.node_network("10.89.77.10", route, IFACES) == {
        "ifname": "eth0",
        "address": "10.89.77.11",
        "how": "route to 10.89.77.10 leaves through eth0",
    }
    # On the head the route is local; the interface is the one holding the address.
    head = mn.node_network("10.89.77.11", "local 10.89.77.11 dev lo table local src 10.89.77.11", IFACES)
    assert head["ifname"] == "eth0"
    assert mn.node_network("10.89.77.10", route, IFACES, "ib0")["address"] == "192.168.9.11"
    with pytest.raises(mn.MultinodeError, match="llm_multinode_ifname='ib9' is not an interface"):
        mn.node_network("10.89.77.10", route, IFACES, "ib9")
    with pytest.raises(mn.MultinodeError, match="no route from this host"):
        mn.node_network("10.1.1.1", "RTNETLINK answers: Network is unreachable", IFACES)
    with pytest.raises(mn.MultinodeError, match="must be an IP address"):
        mn.node_network("head.example", route, IFACES)


def test_reach_problem_accepts_refused_and_names_the_port_otherwise() -> None:
    assert mn.reach_problem("refused", "w", "10.0.0.1", 29501) is None
    assert mn.reach_problem("open", "w", "10.0.0.1", 29501) is None
    assert "w cannot reach the head at 10.0.0.1:29501 (timeout): open TCP 29501" in mn.reach_problem(
        "timeout", "w", "10.0.0.1", 29501
    )


class _Engine(http.server.BaseHTTPRequestHandler):
    """A head whose /health and completions answer what the test sets (a broken group: 200, then 500)."""

    health = 200
    completion = 200
    seen_keys: ClassVar[list[str]] = []

    def _answer(self, code: int) -> None:
        type(self).seen_keys.append(self.headers.get("Authorization", ""))
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b"{}")

    def do_GET(self) -> None:
        self._answer(type(self).health)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer(type(self).completion)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def engine(tmp_path: Path):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env_file = tmp_path / "vllm.env"
    env_file.write_text('# secrets\nVLLM_API_KEY="k-123"\n')
    marker = tmp_path / "restarted"
    spec = {
        "url": f"http://127.0.0.1:{server.server_port}",
        "model": "m",
        "env_file": str(env_file),
        "failures": 2,
        "timeout": 2,
        "active_cmd": ["true"],
        "restart_cmd": ["touch", str(marker)],
    }
    _Engine.health, _Engine.completion, _Engine.seen_keys = 200, 200, []
    yield spec, marker
    server.shutdown()


def test_watchdog_restarts_a_broken_head_once_armed(engine) -> None:
    spec, marker = engine
    dog = watchdog.Watchdog(spec)
    assert dog.round() == "healthy"
    assert _Engine.seen_keys[-1] == "Bearer k-123"
    # A dead worker: /health still 200, requests fail.
    _Engine.completion = 500
    assert dog.round() == "failing" and not marker.exists()
    assert dog.round() == "restarted" and marker.exists()
    # Disarmed until it answers again: a head that cannot start is left to its own restart policy.
    marker.unlink()
    assert [dog.round(), dog.round()] == ["idle", "idle"] and not marker.exists()


def test_watchdog_leaves_a_stopped_or_never_healthy_service_alone(engine) -> None:
    spec, marker = engine
    _Engine.health = 503
    assert [watchdog.Watchdog(spec).round() for _ in range(3)] == ["idle"] * 3
    _Engine.health = 200
    stopped = watchdog.Watchdog(dict(spec, active_cmd=["false"]))
    assert stopped.round() == "idle" and not marker.exists()


def test_watchdog_once_prints_the_round(engine, tmp_path: Path, capsys) -> None:
    spec, _ = engine
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    assert watchdog.main(["vllm_watchdog.py", str(path), "--once"]) == 0
    assert capsys.readouterr().out.strip().endswith("healthy")


def test_worker_watchdog_follows_its_connection_to_the_head(tmp_path: Path) -> None:
    head = socket.create_server(("127.0.0.1", 0))
    port = head.getsockname()[1]
    marker = tmp_path / "restarted"
    spec = {
        "mode": "worker",
        "master_addr": "127.0.0.1",
        "master_port": port,
        "failures": 2,
        "active_cmd": ["true"],
        "restart_cmd": ["touch", str(marker)],
    }
    dog = watchdog.Watchdog(spec)
    # Not connected yet (a worker still starting): nothing to judge.
    assert dog.round() == "idle"
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = head.accept()
    assert watchdog.connected_to("127.0.0.1", port)
    assert dog.round() == "healthy"
    # The head dies: its side closes; the worker's end is left in CLOSE-WAIT, which is no connection.
    accepted.close()
    head.close()
    time.sleep(0.2)
    assert not watchdog.connected_to("127.0.0.1", port)
    assert [dog.round(), dog.round()] == ["failing", "restarted"] and marker.exists()
    client.close()


def test_proc_net_tcp_addresses_are_read_in_host_byte_order() -> None:
    assert watchdog._proc_address("0100007F:7339") == ("127.0.0.1", 29497)
    assert watchdog._proc_address("0A4D590A:1F90") == ("10.89.77.10", 8080)
