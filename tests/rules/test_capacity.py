from __future__ import annotations

import pytest

from gpuaudit.model.snapshot import MigDevice
from gpuaudit.rules.base import Owner, Severity
from gpuaudit.rules.capacity import GIB, read_model

H100 = "NVIDIA H100 80GB HBM3"
H100_MIB = 81559  # what nvidia-smi reports for an H100 80GB


def hgx(make_host, make_gpu, count=8, **changes):
    gpus = [make_gpu(i, name=H100, memory_total_mib=H100_MIB) for i in range(count)]
    return make_host(gpus=gpus, **changes)


# --- GA801 summary ----------------------------------------------------------------------------


def test_summary_per_precision_on_one_gpu_and_the_host(make_host, make_gpu, findings):
    (f,) = findings("GA801", hgx(make_host, make_gpu))
    assert (f.severity, f.owner, f.gpu) == (Severity.INFO, Owner.ML_ENGINEERING, None)
    # One H100: 79.6 GiB × 0.8 = 63.7 GiB usable. 34B at FP16 is 68e9 B = 63.3 GiB + 2 GiB KV.
    assert f.evidence.actual["fp16"]["gpu"] == ["7B", "13B"]
    assert f.evidence.actual["int8"]["gpu"] == ["7B", "13B", "34B"]
    assert f.evidence.actual["int4"]["gpu"] == ["7B", "13B", "34B", "70B"]
    # Eight: 509.7 GiB usable. 405B at INT8 is 377.2 GiB + 2: fits; at FP16 754 GiB: does not.
    assert f.evidence.actual["fp16"]["host"] == ["7B", "13B", "34B", "70B"]
    assert f.evidence.actual["int8"]["host"][-1] == "405B"
    assert f.evidence.expected == {"usable_gib_one_gpu": 63.7, "usable_gib_host": 509.7}
    assert "FP16 ≤ 13B, INT8 ≤ 34B, INT4 ≤ 70B" in f.message
    assert "All 8 whole GPU(s)" in f.message and "2.0 GiB of KV cache" in f.message


def test_summary_of_hosts_alike_is_made_once_and_owned_by_each(make_host, make_gpu):
    """Hosts alike get the same summary, made once; each finding owns its evidence."""
    from gpuaudit.rules import assess
    from gpuaudit.rules.capacity import _fits

    _fits.cache_clear()
    fleet = [hgx(make_host, make_gpu, host=f"gpu-{n:02d}") for n in range(6)]
    fleet.append(hgx(make_host, make_gpu, count=4, host="gpu-four"))
    summaries = [f for f in assess(fleet).findings if f.rule == "GA801"]
    assert _fits.cache_info().misses == 2
    by_host = {f.host: f for f in summaries}
    assert len(by_host) == 7
    first, second = by_host["gpu-00"], by_host["gpu-01"]
    assert first.message == second.message and first.evidence == second.evidence
    assert first.evidence.actual is not second.evidence.actual
    assert first.evidence.actual["fp16"]["gpu"] is not second.evidence.actual["fp16"]["gpu"]
    assert "All 4 whole GPU(s)" in by_host["gpu-four"].message
    assert "All 8 whole GPU(s)" in first.message


def test_summary_follows_policy_sizes_precisions_and_headroom(make_host, make_gpu, findings):
    policy = {
        "capacity_model_sizes_b": [1, 3],
        "capacity_precisions": {"fp32": 4},
        "capacity_kv_cache_gib": 0,
        "memory_headroom_pct": 0,
    }
    small = make_host(gpus=[make_gpu(0, memory_total_mib=8192)])
    (f,) = findings("GA801", small, policy=policy)
    assert f.evidence.actual["fp32"] == {"gpu": ["1B"], "host": ["1B"]}
    assert f.evidence.actual["fp16"]["gpu"] == ["1B", "3B"]  # nested defaults still merge


def test_mig_gpus_count_by_their_largest_instance(make_host, make_gpu, findings):
    devices = (MigDevice(0, 1, 0, "3g.40gb", memory_total_mib=40192),)
    gpus = [make_gpu(0, name=H100, mig_mode_current="Enabled", mig_devices=devices)]
    (f,) = findings("GA801", make_host(gpus=gpus))
    assert "One MIG device (on GPU 0" in f.message
    assert f.evidence.expected["usable_gib_one_gpu"] == 31.4


def test_no_gpu_memory_known_is_silent(make_host, make_gpu, findings):
    assert findings("GA801", make_host(gpus=[make_gpu(0, memory_total_mib=None)])) == []
    assert findings("GA801", make_host(gpus=())) == []


# --- GA802 required models --------------------------------------------------------------------


def test_required_model_that_does_not_fit_names_a_precision_that_would(
    make_host, make_gpu, findings
):
    required = [
        {"name": "llama-3-70b", "params_b": 70, "precision": "fp16", "placement": "gpu"},
        {"name": "mistral-7b", "params_b": 7},
    ]
    snap = hgx(make_host, make_gpu, host_data={"required_models": required})
    (f,) = findings("GA802", snap)
    assert (f.severity, f.owner) == (Severity.HIGH, Owner.ML_ENGINEERING)
    assert "llama-3-70b (70B at FP16: 130.4 GiB weights + 2.0 GiB KV cache" in f.message
    assert "on one GPU (GPU 0" in f.message and "It would fit at INT4." in f.message
    assert f.evidence.expected == {"usable_gib": 63.7, "placement": "gpu"}


def test_seed_kv_cache_formula_decides_the_fit(make_host, make_gpu, findings):
    # Seed 000's example: Llama 7B at 4096 tokens is 2 GiB per request; 64 requests: 128 GiB.
    model = {"name": "llama-7b", "params_b": 7, "layers": 32, "heads": 32, "head_dim": 128}
    model |= {"context_length": 4096}
    assert read_model(model, {"fp16": 2.0}, 0).kv_cache_bytes == 2 * GIB
    busy = dict(model, concurrent_requests=64)
    one_gpu = make_host(gpus=[make_gpu(0, name=H100, memory_total_mib=H100_MIB)])
    assert findings("GA802", one_gpu, policy={"required_models": [model]}) == []
    (f,) = findings("GA802", one_gpu, policy={"required_models": [busy]})
    assert "128.0 GiB KV cache" in f.message and "No precision in the policy" in f.message


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"params_b": 7, "precision": "fp8"}, "precision 'fp8'"),
        ({"name": "x"}, "params_b"),
        ({"params_b": 7, "layers": 32}, "also needs heads, head_dim, context_length"),
        ({"params_b": 7, "gpus": 2}, "unknown field"),
        ("70B", "must be a mapping"),
    ],
)
def test_malformed_required_model_fails_loudly(make_host, make_gpu, findings, entry, message):
    (f,) = findings("GA000", hgx(make_host, make_gpu), policy={"required_models": [entry]})
    assert "GA802" in f.message and message in f.message
