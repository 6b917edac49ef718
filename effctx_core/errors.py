"""The errors a user can act on: each message is one line, each class says what failed.

A failed call leaves its session as it was, or poisons it (SessionFatalError); it never
leaves it half-changed and silent.
"""

from __future__ import annotations


class EffctxError(Exception):
    """An error a user can act on; its message is one line."""


class ModelFileError(EffctxError):
    """The model file is missing, empty, not a GGUF file or unreadable."""


class ContextOverflowError(EffctxError):
    def __init__(self, stage: str, resident: int, additional: int, n_ctx: int):
        self.stage = stage
        self.resident = resident
        self.additional = additional
        self.n_ctx = n_ctx
        super().__init__(
            f"context overflow in {stage}: {resident} resident + {additional} new tokens "
            f"> n_ctx {n_ctx}"
        )

    def __reduce__(self):
        # Pickled across the RPC host's pipe: rebuilt from the fields, not the message.
        return type(self), (self.stage, self.resident, self.additional, self.n_ctx)


class SessionFatalError(EffctxError):
    """The backend state can no longer be trusted; the session must be reopened."""


class RpcWorkerError(SessionFatalError):
    """An RPC worker that is down, stopped answering, or speaks another protocol version:
    the session it served is poisoned, and `worker` says which one ("" when unknown)."""

    def __init__(self, message: str, worker: str = ""):
        self.worker = worker
        super().__init__(message)

    def __reduce__(self):
        return type(self), (str(self), self.worker)


class UnsupportedFeatureError(EffctxError):
    pass


class BackendUnavailableError(EffctxError):
    """This machine lacks something a backend or a profile needs to run at all (a build,
    a binary): nothing is wrong with the model or the profile."""


class Cancelled(EffctxError):
    """Long work stopped at a safe point because it was asked to."""


class QueueFull(EffctxError):
    """The engine's request queue holds as many jobs as it may: this one was refused at
    once, never made to wait for room."""

    def __init__(self, size: int):
        self.size = size
        super().__init__(f"the engine's queue is full ({size} requests waiting); try again when one has finished")

    def __reduce__(self):
        return type(self), (self.size,)


class ServiceStopping(EffctxError):
    """The engine service is stopping: the job was refused, or dropped from its queue unrun."""


class EngineLoadFailed(EffctxError):
    """The shared engine could not be opened; the message is the load's own one-line reason."""
