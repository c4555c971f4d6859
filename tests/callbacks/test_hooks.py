"""The user's question_from / answer_from, bounded: the runner the isolated mode's feeder uses."""

import threading
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from langchain_ragmetrics import ContextRelevance
from langchain_ragmetrics._retrieval import Capture
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
