"""What a runtime does with one retrieval: score it, count the results, hand them over.

Runs on the worker's event loop (in this process, or in the isolated mode's child). The rules
(references, skips, failures) are :func:`~langchain_ragmetrics._retrieval.score_retrieval`'s;
results are appended to each sink's outbox, whose own thread delivers them (see ``_outbox``),
so no sink can hold up scoring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from langchain_ragmetrics._engine import ScoringEngine, failure_report
from langchain_ragmetrics._retrieval import Capture, OnlineResult, Retrieval, score_retrieval
from langchain_ragmetrics._schema import MetricResult
from langchain_ragmetrics.callbacks._hooks import convert, hook_label, late
from langchain_ragmetrics.callbacks._stats import Counters, FailureLog

if TYPE_CHECKING:
    from langchain_ragmetrics.callbacks._outbox import SinkOutbox
    from langchain_ragmetrics.callbacks._settings import HandlerSettings

__all__ = ["ScoringPipeline"]


class ScoringPipeline:
    """Turns a retrieval into metric results and puts them in the sinks' outboxes.

    Args:
        settings: The handler's options (metrics, mappings, reference provider).
        engine: The scoring engine.
        outboxes: One per sink.
        counters: Shared counters.
        failures: Shared log-once reporter.
        forward: Also called with each retrieval's results (the isolated child sends them
            to the application's process, whose sinks deliver them).
    """

    def __init__(
        self,
        *,
        settings: HandlerSettings,
        engine: ScoringEngine,
        outboxes: Sequence[SinkOutbox],
        counters: Counters,
        failures: FailureLog,
        forward: Callable[[list[OnlineResult]], None] | None = None,
    ) -> None:
        self.settings = settings
        self.forward = forward
        self.metrics = list(settings.metrics)
        self.engine = engine
        self.outboxes = list(outboxes)
        self._counters = counters
        self._failures = failures
        self._hooks = hook_label(settings)
        """The user's functions among ``question_from`` / ``answer_from`` ("" for none)."""

    async def plain(self, item: Capture | Retrieval) -> Retrieval:
        """The retrieval as plain data; the user's functions run off the loop, bounded.

        The worker's loop schedules every judge call, so a ``question_from`` /
        ``answer_from`` of the user's runs on a judge thread, as a ``reference_provider``
        does, within the per-job ``timeout`` and the bound on late calls (see
        :mod:`~langchain_ragmetrics._user_calls`).
        """
        if isinstance(item, Retrieval):
            return item
        settings = self.settings
        calls = self.engine.user_calls
        if calls is None or not self._hooks:
            return convert(item, settings)  # only our own readers run
        try:
            return await calls.run(convert, item, settings, what=self._hooks)
        except TimeoutError as exc:  # ours: what the user's functions raise is in the result
            return late(item, str(exc))

    async def process(self, item: Capture | Retrieval) -> None:
        """Score one retrieval with every metric and deliver the results."""
        items = await score_retrieval(
            await self.plain(item),
            self.metrics,
            self.engine,
            reference_provider=self.settings.reference_provider,
            on_error=self._mapping_failed,
        )
        results = [item.result for item in items]
        # Counted and queued at one moment: a reading of the counters with the sinks'
        # figures (a report of the child, a reset) sees both or neither. Nothing under it
        # logs (a log handler may stall, and the application's threads count under it too).
        with self._counters.hold():
            self._count(results)
            dropped = [outbox.put(items) for outbox in self.outboxes]
            if self.forward is not None:
                self.forward(items)
        for outbox, count in zip(self.outboxes, dropped, strict=True):
            outbox.report_dropped(count)
        for result in results:
            if result.failed:
                self._failures.report(*failure_report(result))

    def _mapping_failed(self, exc: Exception) -> None:
        kind = f"mapping:{type(exc).__name__}"
        self._failures.report(kind, f"cannot build the sample of a retrieval: {exc!r}", exc)

    def _count(self, results: Sequence[MetricResult]) -> None:
        scored = failed = skipped = 0
        for result in results:
            self._counters.add_usage(result.usage)
            if result.failed:
                failed += 1
            elif result.skipped:
                skipped += 1
            else:
                scored += 1
        self._counters.add(scored=scored, failed=failed, skipped=skipped)
