"""GA8xx: capacity — which language models fit on a host's GPUs, by the field guide's arithmetic.

    model memory ≈ parameters × bytes per parameter (FP16 2, INT8 1, INT4 0.5) + overhead
    KV cache per request ≈ 2 × layers × heads × head dim × context length × 2 bytes

(docs/field-guide/llm-memory.md). The overhead (activations, CUDA context, allocator
fragmentation) is covered by the memory headroom gpuaudit keeps (``memory_headroom_pct``: 20 %,
docs/field-guide/memory-and-oom.md): a model fits when its weights plus its KV cache fit
in the memory left after the headroom. "One GPU" is the largest single GPU (or, in MIG mode, the
largest MIG device: a model cannot span instances); "the host" is all its whole GPUs together,
as tensor parallelism would use them. Parameters count in decimal units (7B = 7 × 10⁹) as model
sizes are quoted; GPU memory is reported in MiB, and the findings show GiB.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuaudit.model.snapshot import Gpu, HostSnapshot
from gpuaudit.rules import refs
from gpuaudit.rules.audit import GPU_LIST
from gpuaudit.rules.base import Evidence, Finding, Owner, Rule, RuleContext, Severity, rule

GIB = 2**30
_MIB = 2**20
_KV_BYTES_PER_VALUE = 2  # keys and values in FP16 (docs/field-guide/llm-memory.md#kv-cache)
ARCHITECTURE_FIELDS = ("layers", "heads", "head_dim", "context_length")
MODEL_FIELDS = frozenset(
    {"name", "params_b", "precision", "kv_cache_gib", "concurrent_requests", "placement"}
    | set(ARCHITECTURE_FIELDS)
)
PLACEMENTS = ("host", "gpu")
_REFS = (
    refs.GUIDE_LLM_MEMORY,
    refs.GUIDE_QUANTIZATION,
    refs.GUIDE_CAPACITY,
    refs.GUIDE_MEMORY_HEADROOM,
    refs.GUIDE_PREPRODUCTION,
    refs.GUIDE_REPEATED_OOMS,
)


@dataclass(frozen=True)
class Model:
    name: str
    params_b: float
    precision: str
    bytes_per_param: float
    kv_cache_bytes: float
    placement: str = "host"

    @property
    def weights_bytes(self) -> float:
        return self.params_b * 1e9 * self.bytes_per_param

    @property
    def needed_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes


@dataclass(frozen=True)
class Memory:
    """What a host offers, after the headroom: the largest single unit and all whole GPUs."""

    unit_bytes: float
    unit_label: str
    host_bytes: float
    host_gpus: int
    headroom_pct: float

    def usable(self, placement: str) -> float:
        return self.host_bytes if placement == "host" else self.unit_bytes


def host_memory(snap: HostSnapshot, headroom_pct: float) -> Memory | None:
    """The host's usable GPU memory; None when no GPU reported its size."""
    keep = 1.0 - headroom_pct / 100.0
    units = [(_unit_mib(g), g) for g in snap.gpus if g.status == "ok" and _unit_mib(g)]
    if not units:
        return None
    whole = [g.memory_total_mib or 0 for g in snap.gpus if g.status == "ok" and not _in_mig(g)]
    unit_mib, unit_gpu = max(units, key=lambda u: u[0])
    where = f"on GPU {unit_gpu.index}" if _in_mig(unit_gpu) else f"GPU {unit_gpu.index}"
    label = (
        f"{'MIG device' if _in_mig(unit_gpu) else 'GPU'} ({where}, "
        f"{unit_gpu.name or 'unnamed'}, {unit_mib * _MIB / GIB:.1f} GiB)"
    )
    host_mib = sum(whole) if whole else unit_mib
    return Memory(
        unit_bytes=unit_mib * _MIB * keep,
        unit_label=label,
        host_bytes=host_mib * _MIB * keep,
        host_gpus=len(whole) or 1,
        headroom_pct=headroom_pct,
    )


def _in_mig(gpu: Gpu) -> bool:
    return (gpu.mig_mode_current or "").lower() == "enabled"


def _unit_mib(gpu: Gpu) -> int:
    if _in_mig(gpu):
        return max((d.memory_total_mib or 0 for d in gpu.mig_devices), default=0)
    return gpu.memory_total_mib or 0


def _precisions(policy: Mapping[str, Any]) -> dict[str, float]:
    return {str(k).lower(): float(v) for k, v in policy["capacity_precisions"].items()}


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


@rule(
    "GA801",
    "Model sizes that fit this host",
    category="capacity",
    needs=(GPU_LIST,),
    owner=Owner.ML_ENGINEERING,
    severity=Severity.INFO,
    likelihood=1,
    impact=1,
    remediation=(
        "Information for capacity planning: place models on hosts where they fit with the "
        "headroom, or quantize (INT8 / INT4) to fit smaller GPUs."
    ),
    references=_REFS,
)
def capacity_summary(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """Which of the policy's model sizes fit on one GPU and across the host, per precision.

    Checks: for each size in ``capacity_model_sizes_b`` (7B, 13B, 34B, 70B, 405B) and each
    precision in ``capacity_precisions`` (FP16 2, INT8 1, INT4 0.5 bytes per parameter):
    parameters × bytes + ``capacity_kv_cache_gib`` (2 GiB: one 4096-token request of a 7B model)
    against the largest GPU (or MIG device) and against all whole GPUs, each less
    ``memory_headroom_pct`` (20 %). One INFO finding per host with GPUs of known size.
    Why: a model's fit in GPU memory is the first item of the pre-production checklist, and
    running out of GPU memory is the most common way inference fails; the register shows per
    host what can be placed there before anyone tries.
    Evidence: the largest size that fits per precision on one GPU and on the host, and the
    usable memory both were measured against.
    Remediation: none needed; use it to place and size models.
    """
    policy = ctx.settings_for(snap)
    memory = host_memory(snap, float(policy["memory_headroom_pct"]))
    if memory is None:
        return
    message, actual, expected = _fits(
        memory,
        float(policy["capacity_kv_cache_gib"]) * GIB,
        tuple(sorted(float(s) for s in policy["capacity_model_sizes_b"])),
        tuple(_precisions(policy).items()),
    )
    yield rule.finding(
        snap,
        message,
        Evidence(
            fact="gpus[].memory_total_mib",
            # Copies: the text is made once for hosts alike, each finding owns its evidence.
            actual={p: {w: list(v) for w, v in f.items()} for p, f in actual.items()},
            expected=dict(expected),
            excerpt="",
        ),
    )


@functools.lru_cache(maxsize=256)
def _fits(
    memory: Memory,
    kv: float,
    sizes: tuple[float, ...],
    precisions: tuple[tuple[str, float], ...],
) -> tuple[str, dict[str, dict[str, list[str]]], dict[str, float]]:
    """GA801's message and evidence for a host's usable memory: the same for every host of
    a kind (a fleet has few), so made once for each."""
    fits: dict[str, dict[str, list[float]]] = {}
    for precision, per_param in precisions:
        models = [Model(f"{s:g}B", s, precision, per_param, kv) for s in sizes]
        fits[precision] = {
            where: [m.params_b for m in models if m.needed_bytes <= memory.usable(where)]
            for where in ("gpu", "host")
        }

    def largest(where: str) -> str:
        return ", ".join(
            f"{p.upper()} {'≤ ' + format(max(f[where]), 'g') + 'B' if f[where] else 'none'}"
            for p, f in fits.items()
        )

    message = (
        f"One {memory.unit_label}, {_gib(memory.unit_bytes)} usable at "
        f"{memory.headroom_pct:g} % headroom: {largest('gpu')}. All {memory.host_gpus} whole "
        f"GPU(s) of the host, {_gib(memory.host_bytes)} usable (tensor parallel): "
        f"{largest('host')}. Sizes {', '.join(f'{s:g}B' for s in sizes)}, each with "
        f"{_gib(kv)} of KV cache."
    )
    actual = {p: {w: [f"{s:g}B" for s in v] for w, v in f.items()} for p, f in fits.items()}
    expected = {
        "usable_gib_one_gpu": round(memory.unit_bytes / GIB, 1),
        "usable_gib_host": round(memory.host_bytes / GIB, 1),
    }
    return message, actual, expected


@rule(
    "GA802",
    "A model the site must serve does not fit the host",
    category="capacity",
    needs=(GPU_LIST,),
    owner=Owner.ML_ENGINEERING,
    severity=Severity.HIGH,
    likelihood=4,
    impact=4,
    remediation=(
        "Serve the model quantized (the finding names a precision that fits, if any), with a "
        "smaller KV-cache budget (context length, concurrent requests), on hosts with more GPU "
        "memory, or remove the model from this host group's required_models."
    ),
    references=_REFS,
)
def required_model_fit(rule: Rule, snap: HostSnapshot, ctx: RuleContext) -> Iterable[Finding]:
    """A model in the host's ``required_models`` does not fit in its GPU memory.

    Checks: each entry of ``required_models`` (per host or group): ``params_b`` at
    ``precision`` (default fp16, bytes from ``capacity_precisions``) plus its KV cache —
    ``kv_cache_gib``, or the KV-cache formula from ``layers``, ``heads`` (key/value heads),
    ``head_dim``, ``context_length`` and ``concurrent_requests`` (default 1), or else
    ``capacity_kv_cache_gib`` — against the host's memory less ``memory_headroom_pct``:
    all whole GPUs for ``placement: host`` (default), the largest GPU or MIG device for
    ``placement: gpu``. A malformed entry makes the rule fail loudly (GA000).
    Why: a model that does not fit fails at load or runs out of GPU memory under load; the site
    said this host must serve it.
    Evidence: the model's weights and KV cache, the usable memory, and the precisions that
    would fit.
    Remediation: quantize, shrink the KV budget, or move the model to bigger hosts.
    """
    policy = ctx.settings_for(snap)
    required = policy.get("required_models") or ()
    memory = host_memory(snap, float(policy["memory_headroom_pct"]))
    if not required or memory is None:
        return
    precisions = _precisions(policy)
    default_kv = float(policy["capacity_kv_cache_gib"]) * GIB
    for raw in required:
        model = read_model(raw, precisions, default_kv)
        usable = memory.usable(model.placement)
        if model.needed_bytes <= usable:
            continue
        would_fit = [
            p
            for p, per_param in precisions.items()
            if model.params_b * 1e9 * per_param + model.kv_cache_bytes <= usable
        ]
        where = (
            f"across the host's {memory.host_gpus} whole GPU(s)"
            if model.placement == "host"
            else f"on one {memory.unit_label}"
        )
        alternative = (
            f" It would fit at {', '.join(p.upper() for p in would_fit)}."
            if would_fit
            else " No precision in the policy makes it fit."
        )
        yield rule.finding(
            snap,
            f"{model.name} ({model.params_b:g}B at {model.precision.upper()}: "
            f"{_gib(model.weights_bytes)} weights + {_gib(model.kv_cache_bytes)} KV cache = "
            f"{_gib(model.needed_bytes)}) does not fit {where} ({_gib(usable)} usable at "
            f"{memory.headroom_pct:g} % headroom).{alternative}",
            Evidence(
                fact="policy.required_models",
                actual={"needed_gib": round(model.needed_bytes / GIB, 1)},
                expected={"usable_gib": round(usable / GIB, 1), "placement": model.placement},
                excerpt=str(raw),
            ),
        )


def read_model(raw: Any, precisions: Mapping[str, float], default_kv: float) -> Model:
    """One ``required_models`` entry, strictly: unknown fields and missing sizes are errors."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"required_models: each entry must be a mapping, not {raw!r}")
    unknown = set(map(str, raw)) - MODEL_FIELDS
    if unknown:
        raise ValueError(f"required_models: unknown field(s) {', '.join(sorted(unknown))}")
    if not isinstance(raw.get("params_b"), (int, float)) or raw["params_b"] <= 0:
        raise ValueError(f"required_models: params_b (billions of parameters) missing in {raw}")
    precision = str(raw.get("precision", "fp16")).lower()
    if precision not in precisions:
        raise ValueError(f"required_models: precision {precision!r} not in capacity_precisions")
    placement = str(raw.get("placement", "host"))
    if placement not in PLACEMENTS:
        raise ValueError(f"required_models: placement must be one of {', '.join(PLACEMENTS)}")
    return Model(
        name=str(raw.get("name") or f"{raw['params_b']:g}B model"),
        params_b=float(raw["params_b"]),
        precision=precision,
        bytes_per_param=precisions[precision],
        kv_cache_bytes=_kv_cache(raw, default_kv),
        placement=placement,
    )


def _kv_cache(raw: Mapping[str, Any], default_kv: float) -> float:
    if raw.get("kv_cache_gib") is not None:
        return float(raw["kv_cache_gib"]) * GIB
    given = [k for k in ARCHITECTURE_FIELDS if raw.get(k) is not None]
    if not given:
        return default_kv
    if len(given) != len(ARCHITECTURE_FIELDS):
        missing = ", ".join(k for k in ARCHITECTURE_FIELDS if k not in given)
        raise ValueError(f"required_models: the KV-cache formula also needs {missing}")
    per_request = 2 * _KV_BYTES_PER_VALUE
    for key in ARCHITECTURE_FIELDS:
        per_request *= int(raw[key])
    return float(per_request * int(raw.get("concurrent_requests", 1)))
