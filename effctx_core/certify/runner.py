"""`effctx certify`: measure one cell, gate it, and write its certificate.

The stages (throughput, passkey grid, NLL, each workload) are saved as they finish in a
partial file next to the certificates, so a full certification that is stopped resumes
where it stopped; the partial file only counts for the same cell and the same plan. Each
stage keeps the parts of the certificate it makes, checked against the certificate's
schema when read back: a damaged one is said in one line and measured again.

One certification of a cell runs at a time (a flock on locks/<cell key>.lock, naming
its holder); a second one refuses. A timed stage (throughput, a workload) that another
effctx measurement overlapped is not kept: its figures would be the other's load too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from effctx_core import __version__
from effctx_core.atomic import atomic_write_bytes
from effctx_core.backends.profile_loader import legacy_settings
from effctx_core.backends.registry import get_backend
from effctx_core.bench.measuring import Busy, Measurement, Watch, hold, loadavg, measuring
from effctx_core.bench.overhead import run_overhead
from effctx_core.bench.quality import (
    ControlResult,
    LengthResult,
    NLLResult,
    PasskeyGrid,
    reference_profile,
    run_nll,
)
from effctx_core.bench.task_grid import TaskGrid, passkey_grid, run_task_grid
from effctx_core.bench.tasks.families import FAMILIES
from effctx_core.bench.workload_run import run_workload
from effctx_core.bench.workloads import Workload, load_workload
from effctx_core.cancel import CancelToken
from effctx_core.certify.effective import effective_context
from effctx_core.certify.gates import (
    Gate,
    accounting_gate,
    certified_length,
    nll_gate,
    passkey_gate,
    throughput_gate,
)
from effctx_core.certify.hardware import Hardware, this_machine
from effctx_core.certify.plan import CertifyPlan
from effctx_core.certify.schema import stage_kind, stage_problem
from effctx_core.certify.store import CertificateStore
from effctx_core.contract import ModelInfo
from effctx_core.engine import SessionEngine
from effctx_core.errors import EffctxError
from effctx_core.profiles import Profile
from effctx_core.units import format_counted

ProgressFn = Callable[[str, int, int], None]
NoteFn = Callable[[str], None]
# The stages whose figures are times: another measurement running beside one slows them.
TIMED_STAGES = ("throughput", "workload")


class CellBusy(EffctxError):
    """Another process is certifying the cell."""


class OutOfTime(EffctxError):
    """--max-minutes passed: the certification stopped at a stage boundary."""


class MeasurementOverlap(EffctxError):
    """Another effctx measurement ran during a timed stage, which is therefore not kept."""


def profile_digest(profile: Profile) -> str:
    """What the profile makes the runtime do: every setting but its wording."""
    # In the record's shape before backend tables: certificates made then still count.
    settings = {k: v for k, v in legacy_settings(profile).items() if k not in ("name", "description")}
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def cell_key(hardware: Hardware, info: ModelInfo, profile: Profile) -> str:
    parts = [hardware.machine_id, info.backend, info.backend_version, info.device, info.identity.model_sha256,
             profile_digest(profile)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def available_memory() -> int | None:
    """MemAvailable: what the KV cache could take on this machine now."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_limit(info: ModelInfo, profile: Profile) -> int | None:
    """Tokens of the profile's K/V types that the available memory holds, by the backend's
    own capacity model (None where it does not model them)."""
    memory = available_memory()
    if memory is None:
        return None
    memory = max(0, memory - info.facts.file_bytes)  # the weights come first
    row = get_backend(profile.backend).capacity_report(info, profile, memory).row(profile.kv_cache_type_k,
                                                                                profile.kv_cache_type_v)
    return row.tokens if row is not None else None


@dataclass
class _Partial:
    """The finished stages of one cell under one plan, kept on disk between runs."""

    path: Path
    plan: str
    stages: dict[str, Any] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, path: Path, plan: CertifyPlan, profile: str, note: NoteFn) -> _Partial:
        """The stages saved for this plan; each is checked against what its stage makes,
        and one that is damaged is said in one line and left to be measured again."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None  # no partial file, or one from an interrupted write: start over
        if not isinstance(data, dict) or data.get("plan") != plan.key or not isinstance(data.get("stages"), dict):
            return cls(path, plan.key)
        stages = {}
        for name, value in data["stages"].items():
            problem = stage_problem(name, value)
            if problem is None:
                stages[name] = value
            elif stage_kind(name) is not None:
                note(f"effctx: certify: the saved {name.replace(':', ' ')} stage of {profile} is damaged ({problem}): "
                     "measuring it again")
        return cls(path, plan.key, stages, sorted(stages))

    def stage(self, name: str, run: Callable[[], Any]) -> Any:
        if name not in self.stages:
            self.stages[name] = run()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.path, json.dumps({"plan": self.plan, "stages": self.stages}).encode())
        return self.stages[name]

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def cell_lock_path(store: CertificateStore, key: str) -> Path:
    """The file whose flock says who certifies the cell now (it stays for the next one)."""
    return store.root / "locks" / f"{key}.lock"


def _passkey_grid(section: dict) -> PasskeyGrid:
    """The grid a passkey stage kept (the certificate's quality.passkey), for its gate."""
    control = section["control"]
    return PasskeyGrid(tuple(LengthResult(**row) for row in section["by_length"]),
                       ControlResult(control["trials"], control["false_keys"]))


def _throughput_section(report: dict) -> dict:
    """The certificate's throughput part of bench/overhead.py's report."""
    side = lambda d: {"prefill_tps": d["prefill_tps"], "decode_tps": d["decode_tps"]}
    return {
        "prompt_tokens": report["prompt_tokens"], "decode_tokens": report["decode_tokens"],
        "engine": side(report["engine"]),
        "raw": {"name": report["raw"]["name"], **side(report["raw"])},
        "library": {"name": report["library"]["name"], **side(report["library"])},
        "engine_raw": {"prefill": report["prefill_ratio"], "decode": report["decode_ratio"]},
        "engine_library": {"prefill": report["library_prefill_ratio"], "decode": report["library_decode_ratio"]},
    }


@dataclass(frozen=True)
class Certification:
    profile: str
    document: dict
    path: Path
    resumed: tuple[str, ...]

    @property
    def status(self) -> str:
        return str(self.document["status"])


class Certifier:
    """Certifies cells one after another; the NLL reference of each backend and model is
    measured once per run and shared by the cells that need it."""

    def __init__(self, model_path: Path, store: CertificateStore, plan: CertifyPlan,
                 progress: ProgressFn = lambda m, d, t: None, cancel: CancelToken | None = None,
                 note: NoteFn = lambda line: None, what: str = "effctx certify", max_minutes: float | None = None):
        """`note` gets the one-line notes of a run (a damaged saved stage); `what` is how
        the run is named to a second certification of the cell and to other measurements;
        past `max_minutes` no stage starts (OutOfTime), and the finished ones are kept."""
        self.model_path = model_path
        self.store = store
        self.plan = plan
        self.progress = progress
        self.cancel = cancel or CancelToken()
        self.note = note
        self.what = what
        self._references: dict[str, NLLResult] = {}
        self.deadline = None if max_minutes is None else time.monotonic() + max_minutes * 60
        self._others: dict[tuple[int, float, str], dict] = {}

    def steps(self) -> int:
        return 3 + len(self.plan.families) + len(self.plan.workloads)

    def _cell(self, profile: Profile) -> tuple[Hardware, ModelInfo, str]:
        hardware = this_machine()
        info = get_backend(profile.backend).describe(self.model_path, profile)
        return hardware, info, cell_key(hardware, info, profile)

    @contextmanager
    def holding(self, profile: Profile, what: str | None = None) -> Iterator[Measurement]:
        """Hold the cell's certification lock, or CellBusy naming the process that holds it."""
        _, info, key = self._cell(profile)
        with self._hold(profile, info, key, what or self.what) as me:
            yield me

    @contextmanager
    def _hold(self, profile: Profile, info: ModelInfo, key: str, what: str) -> Iterator[Measurement]:
        try:
            with hold(cell_lock_path(self.store, key), what) as me:
                yield me
        except Busy as busy:
            by = busy.holder.describe() if busy.holder else "another process"
            raise CellBusy(f"cell {profile.name} ({info.backend}) is being certified by {by}; wait for it or stop it") \
                from None

    def certify(self, profile: Profile) -> Certification:
        hardware, info, key = self._cell(profile)
        with self._hold(profile, info, key, self.what), measuring(f"{self.what} {profile.name}"):
            return self._certify(profile, hardware, info, key)

    def _certify(self, profile: Profile, hardware: Hardware, info: ModelInfo, key: str) -> Certification:
        partial = _Partial.open(self.store.root / "partial" / f"{key}.json", self.plan, profile.name, self.note)
        steps, plan = self.steps(), self.plan
        def say(what: str, done: int) -> None:
            self.progress(f"{profile.name}: {what}", done, steps)

        def saying(done: int) -> Callable[[str], None]:
            return lambda what: say(what, done)

        names = ["throughput", "passkey", *(f"task:{f}" for f in plan.families), "nll",
                 *(f"workload:{w}" for w in plan.workloads)]

        def stage(name: str, run: Callable[[], Any]) -> Any:
            if name not in partial.stages and self.deadline is not None and time.monotonic() >= self.deadline:
                left = [n.replace(":", " ") for n in names if n not in partial.stages]
                raise OutOfTime(f"certify {profile.name}: the time given is up; left: {', '.join(left)}; "
                                "the same command goes on from there")
            return partial.stage(name, functools.partial(self._watched, profile, name, run))

        self._others.clear()
        say("throughput (engine, raw loop, library)", 0)
        throughput = stage("throughput", lambda: self._throughput(profile))
        say("passkey grid", 1)
        grid = stage("passkey", lambda: self._passkey(profile, saying(1)))
        tasks = {"passkey": grid["task"]}
        for i, family in enumerate(plan.families):
            say(f"task {family}", 2 + i)
            tasks[family] = stage(f"task:{family}", functools.partial(self._task, profile, family, saying(2 + i)))
        step = 2 + len(plan.families)
        say("NLL of the reference text", step)
        nll = stage("nll", lambda: self._nll(profile, info).to_dict())
        workloads = {}
        for i, name in enumerate(plan.workloads):
            workload = load_workload(name)
            say(f"workload {workload.name}", step + 1 + i)
            workloads[workload.name] = stage(f"workload:{workload.name}",
                                             functools.partial(self._workload, profile, workload))
        self.progress(f"{profile.name}: writing the certificate", steps, steps)
        document = self._document(profile, info, hardware, key, throughput, grid["passkey"], tasks, nll, workloads)
        path = self.store.save(document)
        partial.remove()
        return Certification(profile.name, document, path, tuple(partial.resumed))

    # ------------------------------------------------------------------ stages

    def _watched(self, profile: Profile, name: str, run: Callable[[], Any]) -> Any:
        """Run a stage while watching for other effctx measurements: a timed stage that
        one overlaps is refused (at its start, before measuring, or at its end); the
        others are recorded in the certificate."""
        timed = stage_kind(name) in TIMED_STAGES
        with Watch() as watch:
            if timed and watch.seen:
                raise self._overlap(profile, name, watch.seen)
            value = run()
        if timed and watch.seen:
            raise self._overlap(profile, name, watch.seen)
        for m in watch.seen:
            self._others.setdefault((m.pid, m.since, name), {"pid": m.pid, "what": m.what, "stage": name})
        return value

    def _overlap(self, profile: Profile, name: str, seen: list[Measurement]) -> MeasurementOverlap:
        stage = name.replace(":", " ")
        return MeasurementOverlap(
            f"certify {profile.name}: another effctx measurement ran during the {stage} stage, "
            f"{'; '.join(m.describe() for m in seen)}, so its figures are not kept; run `effctx certify --profile "
            f"{profile.name}` again when it has finished (the finished stages are kept)")

    def _throughput(self, profile: Profile) -> dict:
        plan = self.plan
        start = loadavg()
        report = run_overhead(self.model_path, profile, plan.prompt_tokens, plan.decode_tokens, plan.rounds,
                              cancel=self.cancel)
        return {"throughput": _throughput_section(report.to_dict()),
                "load": {"loadavg_start": start, "loadavg_end": loadavg()}}

    def _grid(self, profile: Profile, family: str, depths: tuple[float, ...], say: Callable[[str], None]) -> TaskGrid:
        engine = SessionEngine(self.model_path, profile)
        try:
            engine.open()
            return run_task_grid(engine, FAMILIES[family], self.plan.lengths_for(profile), depths, self.plan.seeds,
                                 lambda what, done, total: say(what), self.cancel)
        finally:
            engine.close()

    def _passkey(self, profile: Profile, say: Callable[[str], None]) -> dict:
        """The passkey family, kept twice: as the passkey gate reads it and as a task."""
        grid = self._grid(profile, "passkey", self.plan.depths, say)
        return {"passkey": passkey_grid(grid).to_dict(), "task": grid.to_dict(self.plan.effective_threshold)}

    def _task(self, profile: Profile, family: str, say: Callable[[str], None]) -> dict:
        return self._grid(profile, family, self.plan.task_depths, say).to_dict(self.plan.effective_threshold)

    def _scored(self, profile: Profile, reference: NLLResult | None, chars: int) -> NLLResult:
        engine = SessionEngine(self.model_path, profile)
        try:
            engine.open()
            return run_nll(engine, reference.nll if reference else None, reference.reference_profile if reference
                           else None, chars)
        finally:
            engine.close()

    def _nll(self, profile: Profile, info: ModelInfo) -> NLLResult:
        scores = info.capabilities.token_scores
        if not scores.supported:
            return NLLResult(False, scores.reason)
        ref_profile = reference_profile(profile)
        chars = self.plan.nll_chars_for(profile)
        digest = f"{profile_digest(ref_profile)}:{chars}"
        if digest not in self._references:
            self.progress(f"{profile.name}: NLL reference ({ref_profile.name})", 2, self.steps())
            measured = self._scored(ref_profile, None, chars)
            self._references[digest] = NLLResult(measured.supported, measured.reason, measured.tokens, measured.nll,
                                                 measured.nll, ref_profile.name)
        reference = self._references[digest]
        if not reference.supported:
            return reference
        if profile_digest(profile) == profile_digest(ref_profile):
            return reference
        return self._scored(profile, reference, chars)

    def _workload(self, profile: Profile, workload: Workload) -> dict:
        report = run_workload(self.model_path, profile, workload, control=self.plan.control, cancel=self.cancel)
        questions = report.questions
        control = [t.control.wall_ms for t in report.turns if t.control is not None]
        figures = {
            "digest": workload.digest,
            "turns": len(report.turns),
            "ttft_ms": [round(t.ttft_ms, 2) for t in report.turns if t.ttft_ms is not None],
            "wall_ms": round(sum(t.wall_ms for t in report.turns), 2),
            "control_wall_ms": round(sum(control), 2) if control and len(control) == len(report.turns) else None,
            "control": report.control_name,
            "decode_tps": round(report.decode_tps or 0.0, 2),
            "reused": sum(t.reused for t in report.turns),
            "computed": sum(t.computed for t in report.turns),
            "correct": sum(bool(t.correct) for t in questions) if questions else None,
            "questions": len(questions) if questions else None,
        }
        return {"workload": figures, "accounting": list(report.accounting)}

    # ------------------------------------------------------------------ the document

    def _document(self, profile: Profile, info: ModelInfo, hardware: Hardware, key: str, throughput: dict,
                  grid: dict, tasks: dict, nll: dict, workloads: dict) -> dict:
        facts = info.facts
        problems = tuple(p for w in workloads.values() for p in w["accounting"])
        turns = sum(w["workload"]["turns"] for w in workloads.values())
        passkey = _passkey_grid(grid)
        nll_result = NLLResult(**{k: v for k, v in nll.items() if k != "delta"})
        ratios = throughput["throughput"]["engine_raw"]
        gates: list[Gate] = [
            passkey_gate(passkey),
            nll_gate(nll_result),
            accounting_gate(turns, problems),
            throughput_gate(ratios["prefill"], ratios["decode"], self.plan.throughput_min_ratio),
        ]
        failed = next((g for g in gates if not g.passed), None)
        certified = certified_length(passkey) if failed is None else None
        skipped = [g for g in gates if g.skipped]
        if failed is not None:
            reason = f"{failed.name} gate failed: {failed.detail} ({failed.measured})"
        else:
            reason = f"every gate passed; certified up to {format_counted(certified or 0, 'token')}"
            if skipped:
                reason += "; " + "; ".join(f"{g.name} {g.detail}" for g in skipped)
        lengths = self.plan.lengths_for(profile)
        document = {
            "schema_version": 1,
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "effctx_version": __version__,
            "cell_key": key,
            "cell": {
                "backend": info.backend, "backend_version": info.backend_version, "device": info.device,
                "profile": profile.name, "profile_digest": profile_digest(profile),
                "kv_type_k": profile.kv_cache_type_k, "kv_type_v": profile.kv_cache_type_v,
                "policy": profile.residency.policy,
                "model": {"name": facts.name, "sha256": info.identity.model_sha256, "bytes": facts.file_bytes},
                **({"placement": [{**asdict(share), "layers": list(share.layers)} for share in info.placement]}
                   if info.placement else {}),
                **({"state_costs": {k: round(v, 3) for k, v in asdict(info.state_costs).items()}}
                   if info.state_costs else {}),
            },
            "hardware": asdict(hardware),
            "plan": self.plan.to_dict(profile),
            "context": {"model": facts.context_length, "memory": memory_limit(info, profile), "allocated": info.n_ctx,
                        "certified": certified,
                        "effective": effective_context(tasks, self.plan.effective_threshold, self.plan.ttft_budget_ms)},
            "prompt_sizes": list(lengths),
            "throughput": throughput["throughput"],
            "load": {"throughput": throughput["load"], "others": list(self._others.values())},
            "accounting": {"turns": turns, "agree": not problems,
                           "detail": problems[0] if problems else f"reported = counted on all {turns} workload turns"},
            "workloads": {name: w["workload"] for name, w in workloads.items()},
            "quality": {"passkey": grid, "nll": nll_result.to_dict(), "tasks": tasks},
            "gates": [g.to_dict() for g in gates],
            "status": "certified" if failed is None else "failed",
            "failed_gate": failed.name if failed else None,
            "reason": reason,
            "unsupported": sorted(name for name, cap in info.capabilities.flags().items() if not cap.supported),
        }
        return document
