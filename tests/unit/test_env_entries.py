import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "filter_plugins"))

from env_entries import AnsibleFilterError, env_entries


def test_entries_keep_order_and_stringify_values():
    got = env_entries({"B": 1, "A": "x"}, "because")
    assert got == [
        {"name": "B", "value": "1", "why": "because"},
        {"name": "A", "value": "x", "why": "because"},
    ]


def test_excluded_prefixes_are_left_out():
    got = env_entries({"NCCL_PROTO": "LL", "VLLM_DISABLED_KERNELS": "K"}, "w", ["NCCL_"])
    assert [e["name"] for e in got] == ["VLLM_DISABLED_KERNELS"]


@pytest.mark.parametrize(("mapping", "why"), [(["A"], "w"), ({"A": 1}, ""), ({"": 1}, "w")])
def test_bad_input_names_the_filter(mapping, why):
    with pytest.raises(AnsibleFilterError, match="env_entries"):
        env_entries(mapping, why)
