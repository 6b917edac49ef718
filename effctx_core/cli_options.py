"""What the headless commands share: one-line argument errors, the runtime options,
progress on stderr and reading the user's text files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .contract import EffctxError
from .profiles import DEFAULT_PROFILE_NAME, Profile, load_profile

EXIT_BAD_INPUT = 2


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + error
        raise EffctxError(message)


def add_runtime_options(p: argparse.ArgumentParser) -> None:
    """The options every command that runs a model shares."""
    p.add_argument("--profile", metavar="NAME|PATH", help=f"a runtime profile (default: {DEFAULT_PROFILE_NAME})")
    p.add_argument("--model", metavar="PATH", help="a GGUF model file (default: the profile's, else the embedded Gemma 3 270M)")
    p.add_argument("--n-ctx", type=int, metavar="N", help="context size in tokens (overrides the profile)")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (overrides the profile; 0 = all free cores)")


def profile_from_args(args: argparse.Namespace) -> Profile:
    profile = load_profile(args.profile)
    changes = {}
    if args.n_ctx is not None:
        changes["n_ctx"] = args.n_ctx
    if args.threads is not None:
        changes["threads"] = args.threads
    return profile.with_changes(**changes) if changes else profile


def model_from_args(args: argparse.Namespace, profile: Profile) -> Path:
    from .models import resolve_model

    return resolve_model(args.model or profile.model, progress=stderr_progress())


def stderr_progress():
    """Progress for long set-up steps: a live line on a terminal, a few lines otherwise."""
    tty = sys.stderr.isatty()
    last = {"stage": None, "step": -1}

    def report(stage: str, done: int, total: int) -> None:
        pct = int(done * 100 / total) if total else 100
        if tty:
            end = "\n" if done >= total else ""
            print(f"\r{stage}: {pct:3d}% ({done >> 20} of {total >> 20} MiB)", end=end, file=sys.stderr, flush=True)
            return
        step = pct // 25
        if stage != last["stage"] or step != last["step"]:
            last.update(stage=stage, step=step)
            print(f"{stage}: {pct}%", file=sys.stderr, flush=True)

    return report


def read_text_file(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EffctxError(f"{what} file not found: {path}") from None
    except IsADirectoryError:
        raise EffctxError(f"{what} file is a directory: {path}") from None
    except UnicodeDecodeError:
        raise EffctxError(f"{what} file is not UTF-8 text: {path}") from None
    except OSError as exc:
        raise EffctxError(f"cannot read {what} file {path}: {exc.strerror}") from None
