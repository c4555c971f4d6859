"""The user's question_from / answer_from, bounded: the runner the isolated mode's feeder uses."""

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from langchain_ragmetrics import ContextRelevance
from langchain_ragmetrics._retrieval import Capture, Retrieval
from langchain_ragmetrics._threads import DaemonThreadPool
from langchain_ragmetrics.callbacks._hooks import MAX_STUCK, HookRunner, hook_label, hook_names
from langchain_ragmetrics.callbacks._settings import HandlerSettings
from tests._support.captures import make_capture
from tests._support.concurrency import wait_until

QUESTION = "What is the code word of item 7?"


def settings(**options: Any) -> HandlerSettings:
    # A judge that is never called: the runner only converts.
    judge = ChatOpenAI(model="judge", api_key=SecretStr("unused"), base_url="http://127.0.0.1:9/v1")
    return HandlerSettings(metrics=[ContextRelevance(llm=judge)], name="hooks-test", **options)


def capture(question: str = QUESTION, *, streamed: str | None = None) -> Capture:
    return make_capture(
        question,
        ("Item 7's code word is teal.",),
        root_inputs={"question": question, "user": "ada"},
        root_outputs={"answer": "teal"},
        streamed_answer=streamed,
    )


def helpers(runner: HookRunner) -> list[threading.Thread]:
    """This runner's helper threads still alive (another test's, stopping, do not count)."""
    return [t for t in runner.threads if t.is_alive()]


def batch(count: int) -> list[Capture]:
    """``count`` retrievals asking ``q0``, ``q1``, ...: a feeder batch."""
    return [
        make_capture(f"q{i}", (f"doc {i}",), root_inputs={"question": f"q{i}"})
        for i in range(count)
    ]


@pytest.fixture
def handoffs(monkeypatch: pytest.MonkeyPatch) -> list[DaemonThreadPool]:
    """The helper pool of every task handed to a helper of these tests' runners, in order."""
    handed: list[DaemonThreadPool] = []
    submit = DaemonThreadPool.submit

    def counted(pool: DaemonThreadPool, fn: Callable[..., Any], /, *args: Any) -> Future[Any]:
        if pool.name == "hooks-test-hooks":
            handed.append(pool)
        return submit(pool, fn, *args)

    monkeypatch.setattr(DaemonThreadPool, "submit", counted)
    return handed


def questions(outcomes: list[Retrieval | Exception]) -> list[str]:
    """Each outcome's question (an exception's type name)."""
    return [o.question if isinstance(o, Retrieval) else type(o).__name__ for o in outcomes]


def test_only_the_users_functions_count_as_hooks() -> None:
    assert hook_names(settings()) == ()
    assert hook_names(settings(question_from="input")) == ()
    assert hook_names(settings(question_from=lambda inputs: None)) == ("question_from",)
    both = settings(question_from=lambda inputs: None, answer_from=lambda outputs: None)
    assert hook_names(both) == ("question_from", "answer_from")


def test_a_hook_that_returns_in_time_is_used_as_is() -> None:
    runner = HookRunner(settings(question_from=lambda inputs: f"{inputs['user']} asks"))
    try:
        retrieval = runner.convert(capture())
        assert (retrieval.question, retrieval.answer, retrieval.error) == ("ada asks", "teal", None)
        (helper,) = runner.threads
        assert helper is not threading.current_thread()  # the hook ran on the helper
    finally:
        runner.stop()


def test_a_hook_that_raises_is_the_retrievals_error_not_the_runners() -> None:
    def question_from(inputs: Any) -> str:
        raise KeyError("question")

    runner = HookRunner(settings(question_from=question_from))
    try:
        retrieval = runner.convert(capture())
        assert retrieval.error is not None
        assert "question_from raised KeyError" in retrieval.error
        assert retrieval.question == QUESTION
    finally:
        runner.stop()


def test_a_hook_past_the_timeout_fails_its_retrieval_and_gets_a_new_helper(
    release: threading.Event,
) -> None:
    calls: list[str] = []

    def answer_from(outputs: Any) -> str:
        calls.append("called")
        if len(calls) == 1:
            release.wait()  # only the timeout ends the runner's wait
        return "from the hook"

    runner = HookRunner(settings(answer_from=answer_from, timeout=0.2))
    try:
        late = runner.convert(capture(streamed="streamed text"))
        assert late.error == "answer_from did not return within 0.2s"
        assert (late.question, late.answer) == (QUESTION, "streamed text")  # as if it raised
        assert [d.text for d in late.documents] == ["Item 7's code word is teal."]
        # The next retrieval goes to a new helper, the first is left to the hook.
        assert runner.convert(capture()).answer == "from the hook"
        assert len(helpers(runner)) == 2
    finally:
        release.set()
    wait_until(lambda: len(helpers(runner)) == 1, "the left helper to exit once its hook returned")
    threads = runner.threads
    runner.stop()
    wait_until(lambda: not any(t.is_alive() for t in threads), "the helper to exit after stop")


def test_at_most_max_stuck_helpers_are_left_then_retrievals_fail_at_once(
    release: threading.Event,
) -> None:
    entered = threading.Semaphore(0)

    def question_from(inputs: Any) -> str:
        entered.release()
        release.wait()
        return "late"

    runner = HookRunner(settings(question_from=question_from, timeout=0.05))
    try:
        for _ in range(MAX_STUCK):
            assert runner.convert(capture()).error == ("question_from did not return within 0.05s")
        assert len(helpers(runner)) == MAX_STUCK
        for _ in range(3):  # no new helper, no call of the hook: failed at once
            error = runner.convert(capture()).error
            assert error is not None
            assert error == (
                "question_from was not called: 4 earlier calls have not returned yet, "
                "and none is made until one does"
            )
        assert len(helpers(runner)) == MAX_STUCK
        for _ in range(MAX_STUCK):  # each stuck call entered the hook exactly once
            assert entered.acquire(timeout=10)
        assert not entered.acquire(blocking=False)
    finally:
        release.set()
    wait_until(lambda: not helpers(runner), "the left helpers to exit once the hook returned")
    runner.stop()


def test_the_timeout_error_names_every_hook_of_the_user(release: threading.Event) -> None:
    def held(value: Any) -> None:
        release.wait()

    both = settings(question_from=held, answer_from=held, timeout=0.05)
    assert hook_label(both) == "question_from / answer_from"
    runner = HookRunner(both)
    try:
        assert runner.convert(capture()).error == (
            "question_from / answer_from did not return within 0.05s"
        )
    finally:
        release.set()
        runner.stop()


def test_a_stopped_runner_refuses_work() -> None:
    runner = HookRunner(settings(question_from=lambda inputs: None))
    runner.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        runner.convert(capture())


def test_a_batch_is_handed_to_the_helper_once_and_converted_in_order(
    handoffs: list[DaemonThreadPool],
) -> None:
    """One handoff per feeder batch (before: one per retrieval, a task each, 5 here)."""
    threads: list[threading.Thread] = []

    def question_from(inputs: Any) -> str:
        threads.append(threading.current_thread())
        return f"asked {inputs['question']}"

    runner = HookRunner(settings(question_from=question_from))
    try:
        outcomes = runner.convert_batch(batch(5))
        assert questions(outcomes) == [f"asked q{i}" for i in range(5)]
        assert all(isinstance(o, Retrieval) and o.error is None for o in outcomes)
        assert len(handoffs) == 1
        (helper,) = runner.threads
        assert threads == [helper] * 5  # one after another, on the helper
        assert runner.convert_batch([]) == []  # nothing to convert: no handoff
        assert len(handoffs) == 1
    finally:
        runner.stop()


def test_a_hang_in_the_middle_of_a_batch_costs_that_retrieval_only(
    handoffs: list[DaemonThreadPool], release: threading.Event
) -> None:
    """The retrieval at work past `timeout` fails as late; the helper is left to it and the
    retrievals after it go to a new helper, each with its own timeout; the left helper, once
    its function returns, converts nothing more."""
    calls: list[tuple[str, threading.Thread]] = []

    def question_from(inputs: Any) -> str:
        calls.append((inputs["question"], threading.current_thread()))
        if inputs["question"] == "q2":
            release.wait()  # only the timeout ends the runner's wait
        return f"asked {inputs['question']}"

    runner = HookRunner(settings(question_from=question_from, timeout=1.0))
    try:
        outcomes = runner.convert_batch(batch(5))
        assert questions(outcomes) == ["asked q0", "asked q1", "q2", "asked q3", "asked q4"]
        held = outcomes[2]
        assert isinstance(held, Retrieval)
        assert held.error == "question_from did not return within 1s"
        assert all(isinstance(o, Retrieval) and o.error is None for o in outcomes if o != held)
        assert len(handoffs) == 2  # the batch, then the rest of it to a new helper
        assert handoffs[0] is not handoffs[1]
        assert len(helpers(runner)) == 2
        first, second = calls[0][1], calls[3][1]
        assert [thread for _, thread in calls] == [first] * 3 + [second] * 2
        kept = list(outcomes)
    finally:
        release.set()
    wait_until(lambda: len(helpers(runner)) == 1, "the left helper to exit once its hook returned")
    assert [name for name, _ in calls] == [f"q{i}" for i in range(5)]  # each converted once
    assert outcomes == kept
    runner.stop()


def test_a_raise_in_the_middle_of_a_batch_fails_that_retrieval_only(
    handoffs: list[DaemonThreadPool],
) -> None:
    def question_from(inputs: Any) -> str:
        if inputs["question"] == "q1":
            raise KeyError("question")
        return f"asked {inputs['question']}"

    unreadable = make_capture("q3", (_Unreadable(),), root_inputs={"question": "q3"})
    runner = HookRunner(settings(question_from=question_from))
    try:
        outcomes = runner.convert_batch([*batch(3), unreadable, *batch(5)[4:]])
        # the user's function raised: the retrieval's error; our conversion raised: its outcome
        assert questions(outcomes) == ["asked q0", "q1", "asked q2", "RuntimeError", "asked q4"]
        raised = outcomes[1]
        assert isinstance(raised, Retrieval)
        assert raised.error is not None
        assert "question_from raised KeyError" in raised.error
        assert str(outcomes[3]) == "unreadable document"
        assert len(handoffs) == 1
        assert len(helpers(runner)) == 1
    finally:
        runner.stop()


def test_a_batch_leaves_at_most_max_stuck_helpers_then_the_rest_fail_at_once(
    handoffs: list[DaemonThreadPool], release: threading.Event
) -> None:
    entered: list[str] = []

    def question_from(inputs: Any) -> str:
        entered.append(inputs["question"])
        release.wait()
        return "late"

    runner = HookRunner(settings(question_from=question_from, timeout=0.05))
    late = "question_from did not return within 0.05s"
    refused = (
        "question_from was not called: 4 earlier calls have not returned yet, "
        "and none is made until one does"
    )
    try:
        outcomes = runner.convert_batch(batch(MAX_STUCK + 3))
        errors = [o.error if isinstance(o, Retrieval) else None for o in outcomes]
        assert errors == [late] * MAX_STUCK + [refused] * 3
        assert questions(outcomes) == [f"q{i}" for i in range(MAX_STUCK + 3)]
        assert len(handoffs) == MAX_STUCK  # one helper per late retrieval, no more
        assert len(helpers(runner)) == MAX_STUCK
        # The next batch: no helper, no call of the function.
        again = runner.convert_batch(batch(2))
        assert [o.error if isinstance(o, Retrieval) else None for o in again] == [refused] * 2
        assert len(handoffs) == MAX_STUCK
        # Each late one entered the function (on a loaded machine, maybe after its wait).
        wait_until(lambda: len(entered) == MAX_STUCK, "the left helpers to enter the hook")
    finally:
        release.set()
    wait_until(lambda: not helpers(runner), "the left helpers to exit once the hook returned")
    assert sorted(entered) == [f"q{i}" for i in range(MAX_STUCK)]  # and converted nothing more
    runner.stop()


class _Unreadable:
    """A retrieved item that cannot be turned into text (its ``__str__`` raises)."""

    def __str__(self) -> str:
        msg = "unreadable document"
        raise RuntimeError(msg)


def test_each_retrieval_of_a_batch_has_its_own_timeout() -> None:
    """The timeout runs from when the helper takes a retrieval up, not from the handoff: two
    that take 0.2 s each, 0.4 s together, are both within a timeout of 0.3 s (with one clock
    for the batch, the second was late). The clock is the test's: the functions move it,
    and the second returns only once the runner looked at it past the batch's first 0.3 s."""
    waiter = threading.current_thread()
    now = [0.0]
    second = threading.Event()
    looked = threading.Event()

    def clock() -> float:
        if threading.current_thread() is waiter and second.is_set():
            looked.set()
        return now[0]

    def question_from(inputs: Any) -> str:
        now[0] += 0.2
        if inputs["question"] == "q1":
            second.set()
            looked.wait(60)  # a ceiling: the runner looks 0.3 s after the handoff
        return f"asked {inputs['question']}"

    runner = HookRunner(settings(question_from=question_from, timeout=0.3), clock=clock)
    try:
        outcomes = runner.convert_batch(batch(2))
        assert looked.is_set()
        assert questions(outcomes) == ["asked q0", "asked q1"]
        assert all(isinstance(o, Retrieval) and o.error is None for o in outcomes)
        assert len(helpers(runner)) == 1  # none left to a late function
    finally:
        runner.stop()
