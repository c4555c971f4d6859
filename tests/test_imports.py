import subprocess
import sys

import langchain_ragmetrics

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
    "JudgeError",
    "JudgedMetric",
    "LangSmithFeedbackSink",
    "LoggingSink",
    "MetricResult",
    "MetricSummary",
    "NonLLMContextPrecision",
    "NonLLMContextRecall",
    "OnlineResult",
    "RagMetricsCallbackHandler",
    "RagSample",
    "RetryPolicy",
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
