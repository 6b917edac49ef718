"""What the headless commands and the console share: one-line argument errors, one
validated number parser, the runtime and sampling options with their checks, progress on
stderr and reading the user's text files."""

from __future__ import annotations

import argparse
import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, NoReturn

from effctx_core.backends.profile_loader import check_profile, load_profile
from effctx_core.contract import DecodeConfig
from effctx_core.errors import EffctxError
from effctx_core.profiles import DEFAULT_PROFILE_NAME, Profile, default_threads
from effctx_core.snapshots.tree_file import check_name
from effctx_core.units import format_bytes, format_count
from effctx_core.user_files import folder_problem, read_input_text, refuse_same_file

EXIT_BAD_INPUT = 2
# 1 MiB of text is some 250,000 tokens, several times the longest context a model here
# holds (32,768 for the embedded Gemma): a bigger file is a mistake (a log, a dump) that
# would fail only at the prefill, after a long tokenization.
PROMPT_FILE_LIMIT = 1 << 20


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not usage + error
        raise EffctxError(message)

    def parse_known_args(self, args=None, namespace=None):
        # An empty value names nothing: `--session ""` or `--model ""` once fell back to
        # the default as if the option were not given. No option has "" for a default,
        # so an empty string here came from the command line.
        parsed, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            value = getattr(parsed, action.dest, None)
            if isinstance(value, str) and not value.strip() and value != action.default:
                name = "/".join(action.option_strings) or action.metavar or action.dest
                self.error(f"argument {name}: an empty value (give one, or leave the option out)")
        return parsed, extras


def session_name(text: str) -> str:
    """An argparse `type=` for a session name: the one name check (check_name) for the
    console's --session, every `sessions` command and the served console."""
    try:
        return check_name(text)
    except EffctxError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def number(kind: type = int, *, at_least: float | None = None, above: float | None = None,
           at_most: float | None = None) -> Callable[[str], int | float]:
    """An argparse `type=` that accepts only finite numbers inside the given bounds, so
    that nan, inf, a negative count or a zero round count never reach the work."""
    bounds = [f"at least {at_least:g}" if at_least is not None else None,
              f"above {above:g}" if above is not None else None,
              f"at most {at_most:g}" if at_most is not None else None]
    wanted = " and ".join(b for b in bounds if b)

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
        ok = math.isfinite(value) and not (
            (at_least is not None and value < at_least) or (above is not None and value <= above)
            or (at_most is not None and value > at_most))
        if not ok:
            raise argparse.ArgumentTypeError(f"{text} is out of range: it must be {wanted or 'a finite number'}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


COUNT = number(int, at_least=1)  # rounds, tokens to generate or measure: zero measures nothing
NON_NEGATIVE = number(int, at_least=0)


def add_runtime_options(p: argparse.ArgumentParser, profile_default: str = DEFAULT_PROFILE_NAME) -> None:
    """The options every command that runs a model shares; `profile_default` says what
    the command runs without --profile."""
    p.add_argument("--profile", metavar="NAME|PATH|auto", help=f"a runtime profile (default: {profile_default}; "
                   "auto: the certified cell that did best on --workload)")
    p.add_argument("--workload", dest="auto_workload", metavar="NAME",
                   help="with --profile auto: the workload to choose for (default: agent-loop)")
    p.add_argument("--model", metavar="PATH", help="a GGUF model file (default: the profile's, else the embedded Gemma 3 270M)")
    p.add_argument("--n-ctx", type=number(int, at_least=16), metavar="N", help="context size in tokens (overrides the profile)")
    p.add_argument("--threads", type=NON_NEGATIVE, metavar="N", help="CPU threads (overrides the profile; 0 = all free cores)")


def add_sampling_options(p: argparse.ArgumentParser, max_tokens: int) -> None:
    """How a reply is sampled: shared by `run` and the console."""
    p.add_argument("--max-tokens", type=NON_NEGATIVE, default=max_tokens, metavar="N",
                   help=f"tokens per reply (default {max_tokens})")
    p.add_argument("--temperature", type=number(float, at_least=0), default=0.0, metavar="T",
                   help="0 is greedy (default)")
    p.add_argument("--top-p", type=number(float, above=0, at_most=1), default=1.0, metavar="P",
                   help="nucleus sampling, above 0 and at most 1 (default 1)")
    p.add_argument("--seed", type=NON_NEGATIVE, metavar="N", help="sampling seed (default: random)")


def decode_config_from_args(args: argparse.Namespace) -> DecodeConfig:
    return DecodeConfig(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)


AUTO_PROFILE = "auto"


def auto_profile(args: argparse.Namespace) -> str:
    """`--profile auto`: the certified cell that did best on the workload (`--workload`,
    or the one a `bench run` names), said in one line on stderr."""
    from effctx_core.certify.matrix import cell_matrix
    from effctx_core.certify.selection import select_profile
    from effctx_core.models import resolve_model

    workload = _auto_workload(getattr(args, "auto_workload", None) or getattr(args, "workload", None))
    path = resolve_model(getattr(args, "model", None), progress=stderr_progress())
    selection = select_profile(cell_matrix(path, path.name), workload)
    print(f"effctx: {selection.reason}", file=sys.stderr, flush=True)
    return selection.profile


def _auto_workload(name: str | None) -> str | None:
    """The workload `--profile auto` chooses for, checked before any model is looked at
    and with `bench run`'s own messages: a workload file with a wrong field, or a name
    that is neither built in nor measured by a stored certificate, is the user's typo,
    not a cell that certification could still measure."""
    from effctx_core.bench.workloads import load_workload, workload_names
    from effctx_core.certify.matrix import stored_documents
    from effctx_core.certify.store import CertificateStore

    if name is None or name in workload_names():
        return name
    if name.endswith(".toml") or "/" in name:
        return load_workload(name).name
    documents, _ = stored_documents(CertificateStore())
    if any(name in document["workloads"] for document in documents):
        return name
    load_workload(name)  # raises bench run's "unknown workload" line
    return name


def profile_from_args(args: argparse.Namespace) -> Profile:
    name = auto_profile(args) if args.profile == AUTO_PROFILE else args.profile
    profile = load_profile(name, note=lambda line: print(f"effctx: note: {line}", file=sys.stderr, flush=True))
    changes = {}
    if args.n_ctx is not None:
        changes["n_ctx"] = args.n_ctx
    if args.threads is not None:
        changes["threads"] = args.threads
    return check_profile(profile.with_changes(**changes)) if changes else profile


def profiles_from_args(args: argparse.Namespace) -> list[Profile]:
    """`--profile a,b,…`: every profile, each checked before any model loads."""
    names = [name.strip() for name in (args.profile or DEFAULT_PROFILE_NAME).split(",") if name.strip()]
    if not names:
        raise EffctxError("--profile names no profile")
    return [profile_from_args(argparse.Namespace(**{**vars(args), "profile": name})) for name in names]


@contextmanager
def step_progress(quiet: bool) -> Iterator[Callable[[str, int, int], None]]:
    """Progress through a run of steps (benchmark turns, certification stages): a live
    bar on a terminal, one line per step otherwise, nothing under --json."""
    if quiet:
        yield lambda message, done, total: None
        return
    if not sys.stderr.isatty():
        yield lambda message, done, total: print(f"[{done}/{total}] {message}", file=sys.stderr, flush=True)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task("starting", total=None)

        def report(message: str, done: int, total: int) -> None:
            bar.update(task, description=message, completed=done, total=total)

        yield report


def stdout_console():
    """A rich console for tables on stdout: a pipe or a file gets the whole width of a
    table, not the 80 columns rich assumes there."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=150)


def runtime_warnings(profile: Profile) -> list[str]:
    """What will run but badly: said once before the work starts."""
    from effctx_core.models import cache_dir

    warnings = []
    cores = default_threads()
    if profile.threads > cores:
        # llama.cpp spins every thread; more threads than cores measured 20x slower here.
        warnings.append(f"{profile.threads} threads on {cores} free core{'s' if cores > 1 else ''}: llama.cpp's "
                        f"threads spin and wait for each other, which makes it many times slower "
                        f"(use --threads {cores} or 0)")
    if (problem := folder_problem(cache_dir(), "the cache folder")) is not None:
        warnings.append(f"{problem}: nothing is cached (the model is hashed again on every run, and no snapshot "
                        "or prefix-cache state is kept)")
    return warnings


def warn(messages: list[str]) -> None:
    for message in messages:
        print(f"effctx: warning: {message}", file=sys.stderr, flush=True)


def check_model_arg(args: argparse.Namespace, profile: Profile) -> None:
    """A model file the user named, checked before any work (the default model is
    prepared later, with progress)."""
    from effctx_core.backends.registry import get_backend

    named = args.model or profile.model
    if named is not None:
        get_backend(profile.backend).check_model(Path(named).expanduser())


def model_from_args(args: argparse.Namespace, profile: Profile) -> Path:
    from effctx_core.models import resolve_model

    return resolve_model(args.model or profile.model, progress=stderr_progress())


def prepared_model(args: argparse.Namespace, profile: Profile) -> Path:
    """The model, with what the profile's backend must make of it before the first open
    (a conversion) done now, with progress, rather than silently inside the open."""
    from effctx_core.backends.registry import get_backend

    path = model_from_args(args, profile)
    backend = get_backend(profile.backend)
    pending = backend.pending_preparation(path, profile)
    if pending:
        print(f"effctx: profile {profile.name!r} {pending}", file=sys.stderr, flush=True)
        backend.prepare(path, profile, stderr_progress())
    return path


def check_trace_arg(path: str | None) -> None:
    if path is not None:
        from effctx_core.events.trace import check_trace_target

        check_trace_target(Path(path))


def _input_files(args: argparse.Namespace, profile: Profile) -> list[tuple[str | None, str]]:
    """The files a run reads, which none of its outputs may be."""
    return [(args.model or profile.model, "model file"), (args.profile, "profile file"),
            (getattr(args, "prefix_file", None), "prefix file"), (getattr(args, "prompt_file", None), "prompt file"),
            (getattr(args, "replay", None), "replayed trace")]


@dataclass(frozen=True)
class RunInputs:
    """What `run`, the console and `serve` were given, checked before any model loads."""

    profile: Profile
    prefix_text: str | None
    warnings: list[str]


def check_run_inputs(args: argparse.Namespace, *traces: str | None) -> RunInputs:
    """The one check of the options that `run`, the console and `serve` share: the
    profile, a named model file, the trace targets, the prefix file; and what will run
    badly (more threads than cores) as warnings."""
    for trace in traces:
        check_trace_arg(trace)
    profile = profile_from_args(args)
    check_model_arg(args, profile)
    for trace in traces:
        if trace is not None:
            refuse_same_file(trace, "trace file", _input_files(args, profile))
    prefix_file = getattr(args, "prefix_file", None)  # `api` takes no prefix: its clients send their own
    prefix_text = read_text_file(prefix_file, "prefix") if prefix_file else None
    return RunInputs(profile, prefix_text, runtime_warnings(profile))


def stderr_progress():
    """Progress for long set-up steps: a live line on a terminal, a few lines otherwise."""
    tty = sys.stderr.isatty()
    last: dict[str, str | int | None] = {"stage": None, "step": -1}

    def report(stage: str, done: int, total: int) -> None:
        pct = int(done * 100 / total) if total else 100
        if tty:
            end = "\n" if done >= total else ""
            # byte counts (a model file) as sizes; step counts (tensors) as counts
            amount = (f"{format_bytes(done)} of {format_bytes(total)}" if total >= 1 << 20
                      else f"{format_count(done)} of {format_count(total)}")
            # erased to the end of the line: a size can come out shorter than the last (2 MiB after 1.99 MiB)
            print(f"\r{stage}: {pct:3d}% ({amount})\x1b[K", end=end, file=sys.stderr, flush=True)
            return
        step = pct // 25
        if stage != last["stage"] or step != last["step"]:
            last.update(stage=stage, step=step)
            print(f"{stage}: {pct}%", file=sys.stderr, flush=True)

    return report


def read_text_file(path: str, what: str) -> str:
    return read_input_text(path, f"{what} file")


def read_prompt_file(path: str) -> str:
    """A file to send as a prompt, whole: UTF-8 text of at most PROMPT_FILE_LIMIT bytes."""
    return read_input_text(path, "prompt file", PROMPT_FILE_LIMIT)


def number_list(text: str, kind, name: str, low: float, high: float) -> list:
    """A comma-separated option (`--depths 0.1,0.5`) as numbers, each within [low, high]."""
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise EffctxError(f"{name} must be a comma-separated list of numbers, not {text!r}") from None
    if not values or any(not low <= v <= high for v in values):
        raise EffctxError(f"{name} must hold numbers from {low} to {high}, not {text!r}")
    return values
