"""Stage: the sandbox. Untrusted code (an `EvalJob` from `leap_gym.evaluation`) runs in a confined worker
process (`worker`), started and fed by the host side (`host`) of a `WorkerPool` (`pool`); a `WorkerOutcome`
comes back."""

from leap_gym.sandbox.pool import (
                                   DEFAULT_ENV_ALLOW,
                                   FAILURES,
                                   GiB,
                                   MiB,
                                   SandboxLimits,
                                   WorkerOutcome,
                                   WorkerPool,
                                   request_replacement,
)

__all__ = ["DEFAULT_ENV_ALLOW", "FAILURES", "GiB", "MiB", "SandboxLimits", "WorkerOutcome", "WorkerPool",
           "request_replacement"]
