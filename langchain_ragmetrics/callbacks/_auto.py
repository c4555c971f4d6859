"""The default ``isolation="auto"``: score in a child process where that is safe, else here.

Under ``auto`` the child runs the judges and the segmentation (the CPU of scoring) and the
user's sinks stay in this process: the child sends its results up and this process delivers
them to the very sink objects the user passed (an ``InMemorySink`` the application reads, a
callable, a file, logs), through the same per-sink outboxes as the thread mode. A sink the
child can build again (:meth:`BaseSink.for_child_process`: a ``LangSmithFeedbackSink`` with
its own client) is built there and delivers from there, so its requests leave the
application's process. The sinks never decide the mode. Safe then means the child can score
exactly what the handler would have scored here:

* the metrics and the ``reference_provider`` cross to the child by value, without anything
  defined in ``__main__`` (which the child does not import). Metrics that pickle as they are
  (the defaults, with the default judge) go as they are; a metric holding a live judge
  (``llm=ChatOpenAI(base_url=..., api_key=...)``) goes without it, with a
  :class:`~langchain_ragmetrics.evaluation._recipe.JudgeRecipe` per distinct judge, and the
  child builds the judges (as ``evaluate(workers=...)`` and Ray do). A judge the recipe
  refuses (its own ``http_client``, ``rate_limiter`` or ``callbacks``, or a chat model
  LangChain cannot serialize) would come out different, so it stays here;
* ``trace_judge`` is None or a project name (a tracer object cannot cross);
* the platform can start a fresh interpreter with inherited pipes (POSIX), the application
  is not a frozen executable (``sys.frozen``: ``sys.executable`` is the app) and the
  interpreter to start looks like Python (an embedding server such as uWSGI reports its own
  binary; ``multiprocessing.set_executable`` names the right one).

Otherwise scoring runs on this process's threads, and one warning per process says why and
how to choose (``isolation="thread"`` silences it; ``ProcessIsolation(setup=...)`` builds
live objects in the child).
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from langchain_core.callbacks import BaseCallbackHandler

from langchain_ragmetrics._errors import SinkUnavailableError
from langchain_ragmetrics._retrieval import OnlineResult
from langchain_ragmetrics.callbacks._isolation import ProcessIsolation, ScoringSetup
from langchain_ragmetrics.callbacks._launch import interpreter
from langchain_ragmetrics.callbacks._stats import logger
from langchain_ragmetrics.callbacks.sinks import BaseSink
from langchain_ragmetrics.metrics._base import BaseRagMetric

if TYPE_CHECKING:
    from langchain_ragmetrics.evaluation._recipe import ScoringRecipe

__all__ = [
    "Resolved",
    "ShippedSetup",
    "mark_warned",
    "platform_reason",
    "reset_warning",
    "resolve_auto",
]

_warned = False
_warn_lock = threading.Lock()


class Resolved(NamedTuple):
    """What ``isolation="auto"`` chose."""

    isolation: Literal["thread"] | ProcessIsolation
    """``"thread"``, or the isolated mode with a setup that rebuilds the objects given."""
    reason: str | None
    """Why scoring stays in this process (None when it goes to a child)."""
    in_child: tuple[int, ...] = ()
    """Positions of the sinks that the child builds again and delivers with
    (:meth:`BaseSink.for_child_process`); the others deliver in this process."""


class ShippedSetup:
    """The child's setup under ``isolation="auto"``: the parent's metrics and provider, by value.

    The metrics are the parent's own objects, or a :class:`ScoringRecipe` (judge-less
    metrics and one recipe per distinct judge) whose judges the child builds. The child
    builds the sinks that can be built again (``sinks``: the pickled list of their
    :meth:`BaseSink.for_child_process` callables) and sends every other result to the
    parent's sinks.
    """

    def __init__(
        self, blob: bytes, names: list[str], judges: int = 0, sinks: bytes | None = None
    ) -> None:
        self.blob = blob
        self.names = names
        self.judges = judges
        self.sinks = sinks

    def __call__(self) -> ScoringSetup:
        shipped, provider = pickle.loads(self.blob)  # noqa: S301 - our parent's bytes
        from langchain_ragmetrics.evaluation._recipe import ScoringRecipe

        metrics = shipped.build_metrics() if isinstance(shipped, ScoringRecipe) else shipped
        factories = [] if self.sinks is None else pickle.loads(self.sinks)  # noqa: S301
        return ScoringSetup(
            metrics=metrics, sinks=[_build_sink(f) for f in factories], reference_provider=provider
        )

    def __repr__(self) -> str:
        recipes = f"; {self.judges} judge recipe{'s' * (self.judges != 1)}" if self.judges else ""
        return f"ShippedSetup({', '.join(self.names)}{recipes}; {len(self.blob):,} bytes)"


def _build_sink(factory: Callable[[], BaseSink]) -> BaseSink:
    """The sink ``factory`` builds in the child, or one that refuses every result if it fails.

    A sink that cannot be built must not turn scoring off for the other sinks: its results
    count as dropped, and the reason is logged (once) in the application's process.
    """
    try:
        sink = factory()
        if not isinstance(sink, BaseSink):
            msg = f"it returned {type(sink).__name__}, not a sink"
            raise TypeError(msg)
    except Exception as exc:
        reason = f"a sink could not be built in the scoring process ({type(exc).__name__}: {exc})"
        logger.warning("ragmetrics: %s; its results are dropped", reason)
        return _Unavailable(reason)
    return sink


class _Unavailable(BaseSink):
    """Stands for a sink the child could not build: refuses every result (counted dropped)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def emit(self, item: OnlineResult) -> None:
        del item
        raise SinkUnavailableError(self.reason)


def _portable(value: object) -> bytes | None:
    """The pickle of ``value`` if a fresh interpreter can load it (nothing from ``__main__``)."""
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None
    return None if b"__main__" in data else data


def platform_reason() -> str | None:
    """Why this interpreter cannot start the scoring process itself (None: it can)."""
    if os.name != "posix":
        return f"the isolated mode's default launcher needs POSIX (this is {os.name!r})"
    if getattr(sys, "frozen", False):
        return "the application is a frozen executable (sys.frozen)"
    executable = interpreter()
    if not executable:
        return "sys.executable is unknown"
    if "python" not in os.path.basename(executable).lower():
        return (
            f"the interpreter to start ({executable}) does not look like Python (an embedding "
            "server?); name one with multiprocessing.set_executable(...)"
        )
    return None


def resolve_auto(
    *,
    metrics: list[BaseRagMetric],
    reference_provider: Any,
    trace_judge: str | BaseCallbackHandler | None,
    sinks: Sequence[BaseSink] = (),
) -> Resolved:
    """Choose the isolated mode when the child can do the same work (see the module doc).

    The arguments are the handler's checked options. The sinks do not decide the mode: with
    a child, those that can be built again there deliver from it, the others here. A
    fallback warns once per process.
    """

    def stay(reason: str) -> Resolved:
        _warn_once(reason)
        return Resolved("thread", reason)

    reason = platform_reason()
    if reason is not None:
        return stay(reason)
    if trace_judge is not None and not isinstance(trace_judge, str):
        return stay("`trace_judge` is a tracer object, which cannot reach a child process")
    if _portable(reference_provider) is None:
        return stay(
            "`reference_provider` cannot be sent to a child process (a lambda or closure, a "
            "live client, a lock, or something defined in __main__)"
        )
    judges = 0
    blob = _portable((metrics, reference_provider))  # metrics that pickle go as they are
    if blob is None:
        recipe = _recipe(metrics)
        if isinstance(recipe, str):
            return stay(recipe)
        judges = len(recipe.judge_recipes)
        blob = _portable((recipe, reference_provider))
    if blob is None:
        return stay(
            "the metrics cannot be sent to a child process (a live object other than the "
            "judge, or a class defined in __main__)"
        )
    names = [m.metric_name for m in metrics]
    moved, factories = _sinks_for_child(sinks)
    shipped = ShippedSetup(blob, names, judges, _portable(factories) if factories else None)
    return Resolved(ProcessIsolation(setup=shipped), None, moved)


def _sinks_for_child(sinks: Sequence[BaseSink]) -> tuple[tuple[int, ...], list[Any]]:
    """The positions of the sinks the child can build again, and how it builds them."""
    moved: list[int] = []
    factories: list[Any] = []
    for i, sink in enumerate(sinks):
        try:
            factory = sink.for_child_process()
        except Exception as exc:  # a sink's own hook must not fail the handler's construction
            logger.warning(
                "%s.for_child_process() failed (%s: %s); it delivers in this process",
                type(sink).__name__,
                type(exc).__name__,
                exc,
            )
            continue
        if factory is not None and _portable(factory) is not None:
            moved.append(i)
            factories.append(factory)
    return tuple(moved), factories


def _recipe(metrics: list[BaseRagMetric]) -> ScoringRecipe | str:
    """Judge-less metrics and a recipe per distinct judge, or why they cannot be made."""
    from langchain_ragmetrics.evaluation._recipe import ScoringRecipe, _RecipeError

    try:
        return ScoringRecipe(metrics)
    except _RecipeError as exc:  # its advice is for evaluate(workers=...): keep the reason
        return exc.reason
    except Exception as exc:  # an odd chat model must not fail the handler's construction
        return f"the metrics cannot be described for a child process ({type(exc).__name__}: {exc})"


def _warn_once(reason: str) -> None:
    """One warning per process: scoring stays on the application's threads, and why."""
    global _warned  # noqa: PLW0603 - one warning per process, by design
    with _warn_lock:
        if _warned:
            return
        _warned = True
    logger.warning(
        "RagMetricsCallbackHandler scores on this process's threads (isolation='thread') "
        "because %s. Scoring then competes with your requests for the GIL (a few ms on "
        "the slowest ones). Pass isolation='thread' to choose this explicitly (no warning), "
        "or ProcessIsolation(setup=...) to build these objects in a child process.",
        reason,
    )


def mark_warned() -> None:
    """Count the fallback warning as given (tests that count warnings)."""
    global _warned  # noqa: PLW0603 - see _warn_once
    with _warn_lock:
        _warned = True


def reset_warning() -> None:
    """Let the next fallback warn again (tests)."""
    global _warned  # noqa: PLW0603 - see _warn_once
    with _warn_lock:
        _warned = False
