import json
import multiprocessing
import pickle
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from pydantic import BaseModel

from langchain_ragmetrics import ContextPrecision, ContextRecall, VerdictCache
from langchain_ragmetrics._cache import (
    default_cache_path,
    judge_identity,
    resolve_cache,
)
from langchain_ragmetrics._errors import CacheError
from langchain_ragmetrics.evaluation import evaluate
from tests._support.judges import (
    EINSTEIN_CONTEXT,
    EINSTEIN_REFERENCE,
    EINSTEIN_VERDICTS,
    keyword_precision,
    payload,
)
from tests._support.openai_server import (
    JudgeRequest,
    JudgeServer,
    reply_error,
    reply_garbage,
    router,
)

ROWS = [
    {
        "question": f"What can you tell me about Albert Einstein? #{i}",
        "contexts": [EINSTEIN_CONTEXT, "Paris is the capital of France."],
        "reference": EINSTEIN_REFERENCE,
    }
    for i in range(3)
]


class Answer(BaseModel):
    ok: bool


def messages(text: str = "hello") -> list[HumanMessage]:
    return [HumanMessage(text)]


def test_default_path_is_under_the_user_cache_dir(tmp_path: Path) -> None:
    # conftest points XDG_CACHE_HOME at a fresh directory for every test
    path = default_cache_path()
    assert path.name == "verdicts.sqlite3"
    assert path.parent.name == "ragmetrics"
    cache = VerdictCache()
    assert cache.path == path
    assert path.exists()


def test_key_depends_on_judge_identity_prompt_and_schema(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path / "c.sqlite3")
    base = ChatOpenAI(model="m", base_url="http://127.0.0.1:1/v1", api_key="k", temperature=0)
    key = cache.key(base, messages(), Answer)
    same = ChatOpenAI(model="m", base_url="http://127.0.0.1:1/v1/", api_key="other", temperature=0)
    assert cache.key(same, messages(), Answer) == key  # the key (a secret) is not identity
    for other in (
        ChatOpenAI(model="m2", base_url="http://127.0.0.1:1/v1", api_key="k", temperature=0),
        ChatOpenAI(model="m", base_url="http://127.0.0.1:2/v1", api_key="k", temperature=0),
        ChatOpenAI(model="m", base_url="http://127.0.0.1:1/v1", api_key="k", temperature=0.7),
        ChatOpenAI(model="m", base_url="http://127.0.0.1:1/v1", api_key="k", temperature=0, seed=3),
    ):
        assert cache.key(other, messages(), Answer) != key, judge_identity(other)
    assert cache.key(base, messages("other payload"), Answer) != key

    class Answer2(BaseModel):
        ok: bool
        why: str

    assert cache.key(base, messages(), Answer2) != key


def test_every_setting_that_changes_the_answer_changes_the_key(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path / "c.sqlite3")
    common: dict[str, Any] = {"model": "m", "base_url": "http://127.0.0.1:1/v1", "api_key": "k"}
    key = cache.key(ChatOpenAI(**common), messages(), Answer)
    changes: list[dict[str, Any]] = [
        {"model": "m2"},
        {"base_url": "http://127.0.0.1:2/v1"},
        {"temperature": 0.3},
        {"top_p": 0.5},
        {"seed": 7},
        {"max_tokens": 64},
        {"reasoning_effort": "high"},
        {"reasoning": {"effort": "low"}},
        {"logit_bias": {"1": 100}},  # its keys became ints: it was left out
        {"default_headers": {"x-route": "judge-b"}},  # a proxy's route
        {"default_query": {"api-version": "2"}},
        {"use_responses_api": True},
    ]
    keys = {cache.key(ChatOpenAI(**{**common, **change}), messages(), Answer) for change in changes}
    assert len(keys) == len(changes)
    assert key not in keys
    base = ChatOpenAI(**common)
    tools = {"tools": [{"type": "function", "function": {"name": "Answer"}}]}
    assert cache.key(base, messages(), Answer, request=tools) != key  # the tool definition
    strict = {"tools": [{"type": "function", "function": {"name": "Answer", "strict": True}}]}
    assert cache.key(base, messages(), Answer, request=strict) != cache.key(
        base, messages(), Answer, request=tools
    )


def test_the_endpoint_from_the_environment_is_part_of_the_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # langchain-openai leaves openai_api_base empty when the URL comes from OPENAI_BASE_URL
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    one = ChatOpenAI(model="llama3.1", api_key="k")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:2/v1")
    two = ChatOpenAI(model="llama3.1", api_key="k")
    assert one.openai_api_base is None
    assert judge_identity(one)["base_url"] == "http://127.0.0.1:1/v1"
    assert judge_identity(two)["base_url"] == "http://127.0.0.1:2/v1"


def all_attributed(req: JudgeRequest) -> dict[str, Any]:
    sentences = payload(req)["reference_sentences"]
    return {
        "statements": [{"index": s["index"], "reason": "r", "attributed": True} for s in sentences]
    }


def test_same_name_judges_on_two_servers_never_share_a_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with (
        JudgeServer(router(RecallStatements=all_attributed)) as yes,
        JudgeServer(router(RecallStatements=EINSTEIN_VERDICTS)) as half,
    ):
        scores = []
        for server in (yes, half, yes, half):
            monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
            llm = ChatOpenAI(model="llama3.1", api_key="test", max_retries=0, timeout=10)
            # cache=True: both judges use the one default cache file
            result = evaluate(ROWS[:1], ["context_recall"], llm=llm, cache=True)
            scores.append(result["context_recall"][0])
        assert scores == [1.0, 0.5, 1.0, 0.5]
        assert (yes.count(), half.count()) == (1, 1)  # each asked once, then its own entry


def test_the_cache_imports_nothing_above_it() -> None:
    # The layers import downward only: the cache knows nothing of metrics or judge calls
    # (metrics/_judge's CachedCall puts the two together), at import time or later.
    import ast

    import langchain_ragmetrics._cache as module

    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    imported = {
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    ours = {name for name in imported if name.startswith("langchain_ragmetrics")}
    assert ours == {"langchain_ragmetrics._errors"}


def test_resolve_cache_options(tmp_path: Path) -> None:
    assert resolve_cache(None) is None
    assert resolve_cache(False) is None
    cache = VerdictCache(tmp_path / "a.sqlite3")
    assert resolve_cache(cache) is cache
    assert resolve_cache(tmp_path / "b.sqlite3").path == tmp_path / "b.sqlite3"  # type: ignore[union-attr]
    assert resolve_cache(True).path == default_cache_path()  # type: ignore[union-attr]
    with pytest.raises(TypeError, match=r"^`cache` must be True, False, None, a file path or "):
        resolve_cache(3)  # type: ignore[arg-type]


SWITCH_WORDS = ["false", "FALSE", " no ", "Off", "0", "1", "true", "yes", "on", "None", "null"]
REFUSED_CACHE_STRINGS = [
    *(
        (
            word,
            ", which reads as a switch: pass cache=True, False or None to turn the verdict "
            f"cache on or off, or write {'./' + word.strip()!r} if a file of that name is meant",
        )
        for word in SWITCH_WORDS
    ),
    *(
        (blank, " (a blank string names no file): pass cache=False or None for no cache")
        for blank in ("", "   ", "\t\n")
    ),
]


@pytest.mark.parametrize(("text", "ending"), REFUSED_CACHE_STRINGS)
def test_a_switch_word_or_a_blank_is_no_cache_file(
    text: str, ending: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cache="false"`` (from an environment variable) used to create a file named false."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^`cache` must be") as info:
        resolve_cache(text)
    expected = f"`cache` must be True, False, None or a file path, got {text!r}{ending}"
    assert str(info.value) == expected
    with pytest.raises(ValueError, match=r"^`cache` must be") as via_evaluate:
        evaluate(
            [{"contexts": ["a"], "reference_contexts": ["a"]}],
            ["non_llm_context_recall"],
            cache=text,
        )
    assert str(via_evaluate.value) == expected
    assert list(tmp_path.iterdir()) == []  # no cache file was made


def test_a_file_named_like_a_switch_is_taken_with_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The way out the message names: a folder part, or a Path, is always a file path."""
    monkeypatch.chdir(tmp_path)
    cache = resolve_cache("./false")
    assert cache is not None
    assert cache.path.resolve() == tmp_path / "false"
    assert (tmp_path / "false").is_file()
    cache.close()
    from_path = resolve_cache(Path("off"))
    assert from_path is not None
    assert from_path.path.resolve() == tmp_path / "off"
    from_path.close()
    named = resolve_cache("falsehoods.sqlite3")  # only the whole word is a switch
    assert named is not None
    assert named.path.name == "falsehoods.sqlite3"
    named.close()


def test_unusable_files_are_refused_with_a_clear_error(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(CacheError, match=r"cannot open the verdict cache .*garbage\.sqlite3"):
        VerdictCache(garbage)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CacheError, match="cannot open the verdict cache"):
        VerdictCache(blocker / "sub" / "c.sqlite3")


def test_parents_are_created_and_wal_is_on(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path / "deep" / "er" / "c.sqlite3")
    cache.put("k", {"a": 1})
    assert cache.get("k") == {"a": 1}
    assert cache.get("missing") is None
    conn = sqlite3.connect(cache.path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    assert len(cache) == 1
    cache.clear()
    assert len(cache) == 0


@pytest.fixture
def judge(judge_server: JudgeServer) -> JudgeServer:
    judge_server.script = router(
        RecallStatements=EINSTEIN_VERDICTS, ContextVerdicts=keyword_precision("Einstein")
    )
    return judge_server


def test_an_unchanged_rerun_makes_no_judge_call(
    judge: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path
) -> None:
    path = tmp_path / "verdicts.sqlite3"
    metrics = [ContextRecall(), ContextPrecision()]
    first = evaluate(ROWS, metrics, llm=make_judge(), cache=path, show_progress=False)
    assert judge.count() == 6
    assert (first.usage.cache_hits, first.usage.cache_misses, first.usage.judge_calls) == (0, 6, 6)
    judge.reset()
    # a new client object, a new cache object on the same file: still the same judge
    second = evaluate(ROWS, metrics, llm=make_judge(), cache=path, show_progress=False)
    assert judge.count() == 0
    assert (second.usage.cache_hits, second.usage.cache_misses) == (6, 0)
    assert second.usage.judge_calls == 0
    assert second["context_recall"] == first["context_recall"]
    assert second["context_precision"] == first["context_precision"]
    assert second.rows[0].results["context_recall"].details == (  # type: ignore[union-attr]
        first.rows[0].results["context_recall"].details  # type: ignore[union-attr]
    )
    assert "Verdict cache: 6 hits, 0 misses" in second.summary()
    # another temperature is another judge: everything is asked again
    evaluate(ROWS, metrics, llm=make_judge(temperature=0.5), cache=path, show_progress=False)
    assert judge.count() == 6


def test_a_changed_row_is_the_only_call(
    judge: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path
) -> None:
    cache = VerdictCache(tmp_path / "v.sqlite3")
    evaluate(ROWS, ["context_recall"], llm=make_judge(), cache=cache, show_progress=False)
    judge.reset()
    changed = [*ROWS[:2], {**ROWS[2], "contexts": [EINSTEIN_CONTEXT, "Berlin is in Germany."]}]
    result = evaluate(changed, ["context_recall"], llm=make_judge(), cache=cache)
    assert judge.count() == 1
    assert (result.usage.cache_hits, result.usage.cache_misses) == (2, 1)
    assert (cache.hits, cache.misses) == (2, 4)


@pytest.mark.parametrize(
    "bad", [reply_garbage(), reply_error(500)], ids=["malformed", "server-error"]
)
def test_only_valid_verdicts_are_cached(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path, bad: Any
) -> None:
    judge_server.script = router(RecallStatements=bad)
    path = tmp_path / "v.sqlite3"
    metric = ContextRecall(retry={"max_retries": 0, "parse_retries": 0, "initial_backoff": 0})
    failed = evaluate(ROWS[:1], [metric], llm=make_judge(), cache=path, show_progress=False)
    assert failed.aggregates["context_recall"].failed == 1
    assert (failed.usage.cache_hits, failed.usage.cache_misses) == (0, 1)  # looked up, not found
    assert len(VerdictCache(path)) == 0
    judge_server.script = router(RecallStatements=EINSTEIN_VERDICTS)
    judge_server.reset()
    ok = evaluate(ROWS[:1], [metric], llm=make_judge(), cache=path, show_progress=False)
    assert judge_server.count() == 1  # the failure was not replayed from the cache
    assert ok["context_recall"] == [0.5]


def test_an_entry_that_no_longer_validates_is_asked_again(
    judge: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path
) -> None:
    cache = VerdictCache(tmp_path / "v.sqlite3")
    evaluate(ROWS[:1], ["context_recall"], llm=make_judge(), cache=cache, show_progress=False)
    with sqlite3.connect(cache.path) as conn:
        conn.execute("UPDATE verdicts SET value = ?", (json.dumps({"nonsense": True}),))
    judge.reset()
    result = evaluate(ROWS[:1], ["context_recall"], llm=make_judge(), cache=cache)
    assert judge.count() == 1
    assert result["context_recall"] == [0.5]


def wrong_indices() -> dict[str, Any]:
    """Valid against RecallStatements, but not one verdict per reference sentence index."""
    first = EINSTEIN_VERDICTS["statements"][0]
    return {"statements": [first, {**first, "index": 9}]}


@pytest.mark.parametrize("path", ["sync", "async"])
async def test_a_stored_verdict_that_fails_the_metrics_check_is_a_miss(
    judge: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path, path: str
) -> None:
    cache = VerdictCache(tmp_path / "v.sqlite3")
    metric = ContextRecall(llm=make_judge(), cache=cache)
    metric.invoke(ROWS[0])
    with sqlite3.connect(cache.path) as conn:  # passes the schema, fails check_sentence_verdicts
        conn.execute("UPDATE verdicts SET value = ?", (json.dumps(wrong_indices()),))
    judge.reset()
    result = metric.invoke(ROWS[0]) if path == "sync" else await metric.ainvoke(ROWS[0])
    assert judge.count() == 1  # the judge was asked again
    assert result.score == 0.5
    assert (result.usage.cache_hits, result.usage.cache_misses) == (0, 1)
    ((value,),) = sqlite3.connect(cache.path).execute("SELECT value FROM verdicts").fetchall()
    assert len(json.loads(value)["statements"]) == 4  # the judge's answer replaced the bad one


def test_a_verdict_holding_a_lone_surrogate_is_stored_and_read_back(
    judge_server: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path
) -> None:
    odd = {
        "statements": [
            {**s, "reason": "odd \ud800 reason"} for s in EINSTEIN_VERDICTS["statements"]
        ]
    }
    judge_server.script = router(RecallStatements=odd)  # sent JSON-escaped, decoded as a lone half
    metric = ContextRecall(llm=make_judge(), cache=VerdictCache(tmp_path / "v.sqlite3"))
    first = metric.invoke(ROWS[0])
    again = metric.invoke(ROWS[0])
    assert first.error is None
    assert judge_server.count() == 1
    assert again.usage.cache_hits == 1
    assert again.details == first.details


def test_the_cache_on_a_metric_works_without_evaluate(
    judge: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path
) -> None:
    # what the online handler does: a metric carrying a cache, called directly
    metric = ContextRecall(llm=make_judge(), cache=VerdictCache(tmp_path / "v.sqlite3"))
    first = metric.invoke(ROWS[0])
    again = metric.invoke(ROWS[0])
    assert judge.count() == 1
    assert (first.usage.cache_misses, again.usage.cache_hits, again.usage.judge_calls) == (1, 1, 0)
    assert again.score == first.score == 0.5


async def test_the_async_path_uses_the_cache_too(
    judge: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path
) -> None:
    metric = ContextRecall(llm=make_judge(), cache=VerdictCache(tmp_path / "v.sqlite3"))
    await metric.ainvoke(ROWS[0])
    again = await metric.ainvoke(ROWS[0])
    assert judge.count() == 1
    assert again.usage.cache_hits == 1


def test_threads_share_one_cache(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path / "v.sqlite3")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(100):
                cache.put(f"{n}-{i}", {"n": n, "i": i})
                assert cache.get(f"{n}-{i}") == {"n": n, "i": i}
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert len(cache) == 800


def _write_from_another_process(path: str, n: str) -> None:
    """A forked writer: its own connection to the shared file, interleaved with the others."""
    cache = VerdictCache(path)
    for i in range(150):
        cache.put(f"{n}-{i}", {"n": n, "i": i})
        assert cache.get(f"{n}-{i}") == {"n": n, "i": i}
        assert cache.get(f"0-{i}") in (None, {"n": "0", "i": i})


def test_processes_share_one_cache_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    VerdictCache(path).put("seed", 1)
    # Forked, not spawned: the children are real processes writing one file, without each
    # paying for importing the package again.
    fork = multiprocessing.get_context("fork")
    procs = [
        fork.Process(target=_write_from_another_process, args=(str(path), str(n))) for n in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert len(VerdictCache(path)) == 4 * 150 + 1


def test_a_cache_that_breaks_mid_run_falls_back_to_the_judge(
    judge: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path
) -> None:
    cache = VerdictCache(tmp_path / "v.sqlite3")
    with sqlite3.connect(cache.path) as conn:
        conn.execute("DROP TABLE verdicts")
    with pytest.warns(RuntimeWarning, match="verdict cache .* unusable"):
        result = evaluate(ROWS, ["context_recall"], llm=make_judge(), cache=cache)
    assert result["context_recall"] == [0.5, 0.5, 0.5]
    assert judge.count() == 3


def test_a_cache_locked_by_another_process_does_not_hold_the_run(
    judge: JudgeServer, make_judge: Callable[..., ChatOpenAI], tmp_path: Path
) -> None:
    path = tmp_path / "v.sqlite3"
    cache = VerdictCache(path, timeout=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer that never lets go
    try:
        with pytest.warns(RuntimeWarning, match="database is locked"):
            result = evaluate(ROWS, ["context_recall"], llm=make_judge(), cache=cache)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result["context_recall"] == [0.5, 0.5, 0.5]  # scored; only the stores were lost
    assert len(cache) == 0


def test_a_cache_crosses_process_boundaries_by_path(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path / "v.sqlite3", timeout=3.0)
    cache.put("k", {"v": 1})
    copy = pickle.loads(pickle.dumps(cache))
    assert (copy.path, copy.timeout) == (cache.path, 3.0)
    assert copy.get("k") == {"v": 1}
    metric = ContextRecall(cache=cache)
    assert pickle.loads(pickle.dumps(metric)).cache.get("k") == {"v": 1}  # type: ignore[union-attr]


def test_a_cache_path_under_home_is_the_users_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``~/v.sqlite3`` used to create a folder named "~" in the working directory."""
    from langchain_ragmetrics._cache import resolve_cache
    from langchain_ragmetrics.evaluation import BatchOptions

    monkeypatch.setenv("HOME", str(tmp_path))
    assert VerdictCache("~/v.sqlite3").path == tmp_path / "v.sqlite3"
    cache = resolve_cache("~/w.sqlite3")
    assert cache is not None
    assert cache.path == tmp_path / "w.sqlite3"
    # A Batch API job's state: looked for in the wrong place, a re-run would upload again.
    assert BatchOptions(state_dir="~/batches").resolved_state_dir() == tmp_path / "batches"  # type: ignore[arg-type]


def test_a_damaged_entry_is_a_miss_not_a_failure(tmp_path: Path) -> None:
    """Before, ``get`` raised on an entry that is not JSON, and that job failed on every run
    (the docstring promises a cache fault never fails a score)."""
    cache = VerdictCache(tmp_path / "c.sqlite3")
    cache.put("k", {"a": 1})
    conn = sqlite3.connect(cache.path)
    with conn:
        conn.execute("UPDATE verdicts SET value = '{\"a\": ' WHERE key = 'k'")
    conn.close()
    with pytest.warns(RuntimeWarning, match="damaged"):
        assert cache.get("k") is None
    cache.put("k", {"a": 2})  # the judge's new answer replaces it
    assert cache.get("k") == {"a": 2}


def test_a_secret_header_counts_by_name_and_an_ordinary_judge_keeps_its_key(
    tmp_path: Path,
) -> None:
    """A rotated token in a header must not empty the cache; a judge without the newer
    settings keeps the key it had (its stored verdicts stay usable)."""
    cache = VerdictCache(tmp_path / "c.sqlite3")
    common: dict[str, Any] = {"model": "m", "base_url": "http://127.0.0.1:1/v1", "api_key": "k"}
    one = ChatOpenAI(**common, default_headers={"Authorization": "Bearer a"})
    two = ChatOpenAI(**common, default_headers={"Authorization": "Bearer b"})
    assert cache.key(one, messages(), Answer) == cache.key(two, messages(), Answer)
    assert "client" not in judge_identity(ChatOpenAI(**common))


def test_a_relative_cache_path_is_taken_from_where_it_was_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a relative path stayed relative, so a copy pickled to a process with another
    working directory (a Ray actor: the cluster's) opened a namesake there; now the path is
    fixed where the cache is made, and the copy opens the same file."""
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(here)
    cache = VerdictCache("verdicts.sqlite3")
    assert cache.path == here / "verdicts.sqlite3"
    cache.put("k", {"v": 1})
    monkeypatch.chdir(elsewhere)
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.path == here / "verdicts.sqlite3"
    assert copy.get("k") == {"v": 1}
    assert list(elsewhere.iterdir()) == []
    copy.close()
    cache.close()
