import subprocess
import sys

import pytest

import langchain_ragmetrics
from langchain_ragmetrics import _errors as errors
from langchain_ragmetrics import evaluation, metrics
from langchain_ragmetrics.evaluation import metric_classes, metric_from_name, metric_names

EXPECTED = {
    "BaseRagMetric",
    "BaseSink",
    "CallableSink",
    "ContextEntityRecall",
    "ContextPrecision",
    "ContextRecall",
    "ContextRelevance",
    "DatasetError",
    "EvaluationResult",
    "HandlerStats",
    "IDBasedContextPrecision",
    "IDBasedContextRecall",
    "InMemorySink",
    "JsonlSink",
    "JudgeConfigError",
    "JudgeError",
    "JudgeSetupError",
    "JudgedMetric",
    "LangSmithFeedbackSink",
    "LoggingSink",
    "MetricResult",
    "MetricSummary",
    "MissingFieldError",
    "NonLLMContextPrecision",
    "NonLLMContextRecall",
    "OnlineResult",
    "OpenTelemetrySink",
    "RagMetricsCallbackHandler",
    "RagMetricsError",
    "RagSample",
    "RetryPolicy",
    "UnknownMetricError",
    "UnsupportedLanguageError",
    "Usage",
    "__version__",
    "aevaluate",
    "check_judge",
    "evaluate",
    "load_dataset",
}


def test_all_is_sorted_and_complete() -> None:
    assert langchain_ragmetrics.__all__ == sorted(langchain_ragmetrics.__all__)
    assert set(langchain_ragmetrics.__all__) >= EXPECTED


def test_every_public_name_resolves() -> None:
    for name in langchain_ragmetrics.__all__:
        assert getattr(langchain_ragmetrics, name) is not None, name


def test_import_is_light() -> None:
    code = (
        "import sys, langchain_ragmetrics as m\n"
        "heavy = [n for n in ('langchain_openai', 'openai', 'langsmith', 'pysbd', 'rapidfuzz',"
        " 'numpy', 'langchain_core') if n in sys.modules]\n"
        "m.ContextRecall\n"
        "late = [n for n in ('langchain_openai', 'openai') if n in sys.modules]\n"
        "print(heavy, late)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[] []"


# The builtin each public exception also derives from (code catching builtins keeps working).
NATURAL_BASE = {
    "BatchError": RuntimeError,
    "CacheError": OSError,
    "CalibrationSetError": ValueError,
    "CheckpointError": ValueError,
    "ComparisonError": ValueError,
    "DatasetError": ValueError,
    "DeadlineExceededError": TimeoutError,
    "HookError": RuntimeError,
    "JudgeConfigError": RuntimeError,
    "JudgeError": RuntimeError,
    "JudgeSetupError": RuntimeError,
    "MissingFieldError": ValueError,
    "MonitorError": RuntimeError,
    "PreflightError": RuntimeError,
    "QualityGateError": AssertionError,
    "ResultFileError": ValueError,
    "SinkSkipError": RuntimeError,
    "SinkUnavailableError": RuntimeError,
    "UnknownMetricError": ValueError,
    "UnsupportedLanguageError": ValueError,
}


@pytest.mark.parametrize("name", sorted(NATURAL_BASE))
def test_exceptions_form_one_public_hierarchy(name: str) -> None:
    cls = getattr(errors, name)
    assert issubclass(cls, errors.RagMetricsError)
    assert issubclass(cls, NATURAL_BASE[name])
    assert cls.__module__ == "langchain_ragmetrics._errors"  # never a private module
    assert getattr(langchain_ragmetrics, name) is cls


def test_every_public_exception_the_package_defines_is_in_errors() -> None:
    import langchain_ragmetrics._cli
    import langchain_ragmetrics.callbacks._isolated
    import langchain_ragmetrics.integrations.langsmith
    import langchain_ragmetrics.integrations.monitor  # noqa: F401

    ours = [
        c for c in _subclasses(BaseException) if c.__module__.startswith("langchain_ragmetrics")
    ]
    # A public exception lives in errors.py; elsewhere only private helpers (``_Name``).
    elsewhere = [
        f"{c.__module__}.{c.__qualname__}"
        for c in ours
        if c.__module__ != "langchain_ragmetrics._errors" and not c.__name__.startswith("_")
    ]
    assert elsewhere == [], "move public exceptions to langchain_ragmetrics/_errors.py"
    public = {c.__name__ for c in ours if c.__module__ == "langchain_ragmetrics._errors"}
    not_exceptions = {"suggest", "RowProblem", "RowRef"}  # a DatasetError's row details
    assert public == set(errors.__all__) - not_exceptions, "list each exception in errors.__all__"
    assert public == set(NATURAL_BASE) | {"RagMetricsError"}  # each checked above
    assert all(issubclass(getattr(errors, name), errors.RagMetricsError) for name in public)


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def test_old_import_places_still_work() -> None:
    from langchain_ragmetrics._dataset import DatasetError, MissingFieldError
    from langchain_ragmetrics._gate import DeadlineExceededError
    from langchain_ragmetrics.callbacks._isolated import HookError
    from langchain_ragmetrics.integrations._monitor_checkpoint import CheckpointError
    from langchain_ragmetrics.integrations.monitor import MonitorError
    from langchain_ragmetrics.metrics._judge import JudgeConfigError

    assert DeadlineExceededError is errors.DeadlineExceededError
    assert HookError is errors.HookError
    assert CheckpointError is errors.CheckpointError
    assert MonitorError is errors.MonitorError
    assert DatasetError is errors.DatasetError
    assert MissingFieldError is errors.MissingFieldError
    assert JudgeConfigError is errors.JudgeConfigError
    assert metrics.JudgeError is errors.JudgeError
    assert evaluation.JudgeSetupError is errors.JudgeSetupError
    assert evaluation.UnknownMetricError is errors.UnknownMetricError


def test_the_registry_is_the_one_list_of_metrics() -> None:
    classes = metric_classes()
    assert list(classes) == metric_names()
    assert set(metric_names(judged=True)) | set(metric_names(judged=False)) == set(classes)
    assert metric_names(judged=True) == [
        "context_recall",
        "context_precision",
        "context_entity_recall",
        "context_relevance",
    ]
    # Every metric class the package defines is registered, and exported from the root.
    defined = {
        cls
        for cls in _subclasses(metrics.BaseRagMetric)
        if not cls.__name__.startswith("_")
        and cls is not metrics.JudgedMetric
        and cls.__module__.startswith("langchain_ragmetrics.metrics.")
    }
    assert defined == set(classes.values())
    assert all(getattr(langchain_ragmetrics, cls.__name__) is cls for cls in defined)


@pytest.mark.parametrize(
    ("typo", "guess"),
    [
        ("context_recal", "context_recall"),
        ("Context-Precision", "context_precision"),
        ("contxt_relevance", "context_relevance"),
        ("nonllm_context_recall", "non_llm_context_recall"),
        ("id_based_recall", "id_based_context_recall"),
    ],
)
def test_unknown_metric_suggests_the_closest_name(typo: str, guess: str) -> None:
    with pytest.raises(errors.UnknownMetricError) as info:
        metric_from_name(typo)
    assert info.value.suggestions[0] == guess
    assert f"unknown metric {typo!r} (did you mean {guess!r}" in str(info.value)
    assert "known metrics: context_entity_recall, context_precision, " in str(info.value)


def test_an_option_no_metric_has_is_refused() -> None:
    """A typo such as ``lm=`` was dropped, and the metric judged with the default model."""
    with pytest.raises(TypeError, match="no metric has the option"):
        metric_from_name("context_recall", lm="my-judge", langauge="ja")
    # An option some other metric has is dropped for one that lacks it: one set builds all.
    lexical = metric_from_name("non_llm_context_recall", llm=None, retry=None, threshold=0.9)
    assert type(lexical).__name__ == "NonLLMContextRecall"
    assert lexical.threshold == 0.9  # its own option applied, the others' dropped


def test_unknown_metric_without_a_close_name_lists_them_all() -> None:
    with pytest.raises(
        errors.UnknownMetricError, match=r"^unknown metric 'bleu'; known metrics: "
    ) as info:
        metric_from_name("bleu")
    assert info.value.suggestions == []
    assert info.value.known == sorted(metric_names())


def test_scorers_are_public_in_metrics() -> None:
    assert metrics.__all__ == sorted(metrics.__all__)
    scorers = {n for n in metrics.__all__ if n.startswith("score_")}
    assert scorers == {
        "score_context_precision",
        "score_context_recall",
        "score_context_relevance",
        "score_entity_recall",
    }
    verdict = metrics.score_context_recall(
        ["A.", "B."],
        metrics.RecallStatements(
            statements=[
                metrics.StatementVerdict(index=0, attributed=True, reason=""),
                metrics.StatementVerdict(index=1, attributed=False, reason=""),
            ]
        ),
    )
    assert verdict.score == 0.5


def test_one_way_to_get_a_langsmith_evaluator() -> None:
    from langchain_ragmetrics.integrations import langsmith as integration

    assert not hasattr(metrics.BaseRagMetric, "as_langsmith_evaluator")
    assert not hasattr(integration, "as_langsmith_evaluator")
    evaluator = integration.metric_to_langsmith_evaluator(metrics.IDBasedContextRecall())
    assert isinstance(evaluator, integration.RagMetricEvaluator)
