"""Options of the isolated mode: what the child process scores with, and how it is supervised.

Judges hold HTTP clients and sinks hold files or network clients: none of them can cross a
process boundary, so the child builds its own from :attr:`ProcessIsolation.setup`.
"""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Callable
from functools import reduce
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from langchain_ragmetrics._options import AS_GIVEN
from langchain_ragmetrics.callbacks.sinks import BaseSink
from langchain_ragmetrics.metrics._base import BaseRagMetric

__all__ = ["ProcessIsolation", "ScoringSetup", "SetupSource", "build_setup"]


class ScoringSetup(BaseModel):
    """What the child process of an isolated handler scores with; built in the child.

    Judges hold HTTP clients and sinks hold files or network clients: none of them can
    cross a process boundary, so the child builds its own from the function named by
    :attr:`ProcessIsolation.setup`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    metrics: list[BaseRagMetric] | None = None
    """The metrics; default ``[ContextRelevance(), ContextPrecision()]`` with the default
    judge (configured by the ``OPENAI_*`` variables the child inherits)."""
    sinks: list[BaseSink] | None = None
    """The sinks; default a ``LoggingSink``, whose records are logged by the application's
    process (the child forwards its log records)."""
    reference_provider: Callable[..., Any] | None = None
    """See the handler's ``reference_provider``; called in the child."""


SetupSource = str | Callable[[], ScoringSetup]
"""A ``"package.module:function"`` path or a picklable callable returning a ScoringSetup."""


class ProcessIsolation(BaseModel):
    """Options of the isolated mode: ``RagMetricsCallbackHandler(isolation=ProcessIsolation())``.

    Trade-offs: the child is a second Python process (about 100 MiB with the judge stack,
    a few seconds to start, paid once, in the background); metrics, judges, sinks and the
    ``reference_provider`` are built in the child from ``setup`` (so they cannot share
    objects with the application: an ``InMemorySink`` there is out of the application's
    reach); ``question_from`` and ``answer_from`` run on the caller's thread, as the root
    run's input and output are turned into plain data there.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    setup: SetupSource | None = None
    """Builds the metrics and sinks in the child: ``"package.module:function"`` or a
    picklable callable (a module-level function or a ``functools.partial`` of one) returning
    a :class:`ScoringSetup`. None: the default metrics and a ``LoggingSink``."""
    hang_timeout: Annotated[float | None, AS_GIVEN] = Field(default=60.0, gt=0)
    """A running child silent this long (it reports every second while alive) is killed
    and replaced; the retrievals it held count as ``abandoned``. None: never."""
    start_timeout: Annotated[float, AS_GIVEN] = Field(default=120.0, gt=0)
    """Seconds a new child may take to import its libraries and build its setup before it
    is treated as hung."""
    niceness: Annotated[int, AS_GIVEN] = Field(default=10, ge=0, le=19)
    """Added to the child's scheduling niceness (POSIX ``nice``): when the CPUs are busy the
    operating system runs the application first and scoring with what is left. 0 keeps the
    application's priority."""
    idle_priority: StrictBool = True
    """On Linux, the child's scoring threads run under the ``SCHED_IDLE`` policy: any thread
    of the machine that wants a CPU gets it before them, at once, so scoring cannot make the
    application's requests wait for a CPU (with ``niceness`` alone a scoring thread finishes
    its time slice first). While every CPU stays busy, a guard puts them back under the normal
    policy (at ``niceness``) for a while, so scoring slows down but never stops; the queue
    bound drops what does not fit (counted as ``dropped``). The child's heartbeat keeps its
    normal priority. False: ``niceness`` only. Ignored elsewhere than Linux."""
    max_restarts: Annotated[int, AS_GIVEN] = Field(default=3, ge=0)
    """Crashes in a row (without any work done in between) after which the handler stops
    starting children and drops new work, with one warning."""

    @property
    def heartbeat(self) -> float:
        """Seconds between the child's reports when nothing changed (its proof of life)."""
        return min(1.0, (self.hang_timeout or 4.0) / 4)

    @field_validator("setup")
    @classmethod
    def _check_setup(cls, value: SetupSource | None) -> SetupSource | None:
        if value is None:
            return None
        if isinstance(value, str):
            _resolve(value)
            return value
        if not callable(value):
            msg = "`setup` must be a 'package.module:function' path or a callable"
            raise TypeError(msg)
        try:
            pickle.dumps(value)
        except Exception as exc:
            msg = (
                f"`setup` must be picklable to reach the child process ({exc}); use a "
                "module-level function, a functools.partial of one, or a "
                "'package.module:function' path"
            )
            raise ValueError(msg) from exc
        return value


def _resolve(path: str) -> Callable[[], ScoringSetup]:
    """The callable a ``"package.module:function"`` path names (imported now)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        msg = f"`setup` {path!r} must look like 'package.module:function'"
        raise ValueError(msg)
    try:
        target = reduce(getattr, attr.split("."), importlib.import_module(module_name))
    except (ImportError, AttributeError) as exc:
        msg = f"`setup` {path!r} cannot be found: {exc}"
        raise ValueError(msg) from exc
    if not callable(target):
        msg = f"`setup` {path!r} is not callable"
        raise TypeError(msg)
    return target


def build_setup(source: SetupSource | None) -> ScoringSetup:
    """Call the setup function (in the child) and check what it returned."""
    if source is None:
        return ScoringSetup()
    target = _resolve(source) if isinstance(source, str) else source
    setup = target()
    if not isinstance(setup, ScoringSetup):
        msg = f"`setup` must return a ScoringSetup, got {type(setup).__name__}"
        raise TypeError(msg)
    return setup
