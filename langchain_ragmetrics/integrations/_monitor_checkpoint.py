"""The monitor's checkpoint: which (run, metric) pairs are settled, in a small SQLite file.

A pair is written once its feedback was accepted by LangSmith (or it needed none), in its
own transaction, so a worker killed at any point resumes with exactly the unsettled pairs.
An *intent* is written just before a feedback is sent: a restarted worker asks LangSmith
whether those few were received instead of sending them again. Failed attempts are counted
so a sample the judge can never score stops being retried.

A result the judge produced but LangSmith did not accept (a failed send, a worker killed
mid-send) is *kept* with its intent, as JSON, until its pair is settled: the next attempt,
in this run or a later one, sends it again instead of paying the judge twice. The file then
holds that result's sample (question, contexts, answer) until it is sent.

Settled pairs are pruned by age (``prune``, the monitor's ``retention``): a pair is only
looked up for a run the monitor lists, so one settled before the monitor's listing window
is dead weight. A run with unsettled work (an intent, a kept result, a counted failure) keeps
all its pairs: it is read again by id, whatever its age. The latest cutoff that deleted
anything is recorded (``pruned_before``), so a later run whose window reaches back past it is
refused instead of judging those runs again. Freed pages are reused: the file stops growing.

A file that stops working mid-run (a full disk, an I/O error, a file replaced under the
run) raises :class:`CheckpointError` naming it, from every method: the monitor stops rather
than judge (and pay for) runs whose outcome it cannot record.

One run at a time: a lock file beside it (``<checkpoint>.lock``) is held while it is open, so
an overlapping run (a cron job started before the last one ended) fails at once instead of
judging the same runs again.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from langchain_ragmetrics._errors import CheckpointError
from langchain_ragmetrics._files import exclusive_lock

__all__ = ["Checkpoint", "CheckpointError"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settled (
    run_id TEXT NOT NULL,
    metric TEXT NOT NULL,
    outcome TEXT NOT NULL,
    settled_at REAL NOT NULL,
    PRIMARY KEY (run_id, metric)
);
CREATE INDEX IF NOT EXISTS settled_by_age ON settled (settled_at);
CREATE TABLE IF NOT EXISTS intents (
    run_id TEXT NOT NULL,
    metric TEXT NOT NULL,
    PRIMARY KEY (run_id, metric)
);
CREATE TABLE IF NOT EXISTS kept (
    run_id TEXT NOT NULL,
    metric TEXT NOT NULL,
    result TEXT NOT NULL,
    PRIMARY KEY (run_id, metric)
);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL,
    metric TEXT NOT NULL,
    failures INTEGER NOT NULL,
    PRIMARY KEY (run_id, metric)
);
"""


class Checkpoint:
    """A thread-safe SQLite record of settled (run, metric) pairs.

    Args:
        path: The file (created with its directory's permissions); ``":memory:"`` keeps
            it in memory (no restart safety).
        project: The LangSmith project; a file written for another project is refused.
    """

    def __init__(self, path: str | os.PathLike[str], *, project: str) -> None:
        self.path = str(path)
        self._held = contextlib.ExitStack()
        if self.path != ":memory:":
            parent = Path(self.path).parent
            if not parent.is_dir():
                msg = f"checkpoint directory {parent} does not exist"
                raise CheckpointError(msg)
            self._hold(Path(f"{self.path}.lock"))
        self._lock = threading.Lock()
        try:
            self._open(project)
        except BaseException:
            self._held.close()
            raise

    def _hold(self, lock: Path) -> None:
        """One run per checkpoint: a second would judge (and pay for) the same runs again."""
        try:
            self._held.enter_context(exclusive_lock(lock))
        except BlockingIOError as exc:
            msg = (
                f"checkpoint {self.path} is in use by another monitor run (lock {lock}); "
                "two runs on one checkpoint would judge the same runs twice: wait for it "
                "to end, or split the work with --shard I/N, one checkpoint per shard"
            )
            raise CheckpointError(msg) from exc
        except OSError as exc:
            msg = f"checkpoint {self.path} cannot be locked ({lock}): {exc}"
            raise CheckpointError(msg) from exc

    def _open(self, project: str) -> None:
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # Commits reach the OS at once (a killed worker loses nothing) without an fsync
            # each; only a power cut could lose the last few, which are then scored again.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key = 'project'").fetchone()
        except sqlite3.DatabaseError as exc:
            msg = f"checkpoint {self.path} cannot be used: {exc}"
            raise CheckpointError(msg) from exc
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('project', ?)", (project,))
        elif row[0] != project:
            msg = (
                f"checkpoint {self.path} belongs to project {row[0]!r}, not {project!r}; "
                "use another --checkpoint file"
            )
            raise CheckpointError(msg)

    @contextlib.contextmanager
    def _using(self) -> Iterator[None]:
        """Hold the file's lock; a SQLite failure becomes a :class:`CheckpointError`."""
        with self._lock:
            try:
                yield
            except sqlite3.Error as exc:
                msg = (
                    f"checkpoint {self.path} cannot be read or written "
                    f"({type(exc).__name__}: {exc}); the monitor stops rather than judge runs "
                    "it cannot record: free space or mend the file, then run again"
                )
                raise CheckpointError(msg) from exc

    def settled(self, run_ids: Iterable[str]) -> dict[str, set[str]]:
        """The settled metrics of each of ``run_ids`` (runs with none are absent)."""
        return {run_id: set(found) for run_id, found in self.outcomes(run_ids).items()}

    def outcomes(self, run_ids: Iterable[str]) -> dict[str, dict[str, str]]:
        """``{run_id: {metric: outcome}}`` of the settled pairs of ``run_ids``.

        Outcomes: ``scored``, ``failed`` (the failure was posted), ``skipped``,
        ``trace-error`` and ``sent-before-restart`` (a score found in LangSmith).
        """
        ids = list(dict.fromkeys(run_ids))
        found: dict[str, dict[str, str]] = {}
        with self._using():
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT run_id, metric, outcome FROM settled WHERE run_id IN ({marks})",  # noqa: S608
                    chunk,
                ).fetchall()
                for run_id, metric, outcome in rows:
                    found.setdefault(run_id, {})[metric] = outcome
        return found

    def settle(self, run_id: str, metric: str, outcome: str) -> None:
        """Record a pair as settled (committed before returning)."""
        with self._using():
            self._db.execute(
                "INSERT OR REPLACE INTO settled VALUES (?, ?, ?, ?)",
                (run_id, metric, outcome, time.time()),
            )
            for table in ("attempts", "intents", "kept"):
                self._db.execute(
                    f"DELETE FROM {table} WHERE run_id = ? AND metric = ?",  # noqa: S608
                    (run_id, metric),
                )

    def intend(self, run_id: str, metric: str, result: str | None = None) -> None:
        """Record that a pair's feedback is about to be sent (committed before returning).

        ``result``: the judged result as JSON, kept until the pair is settled.
        """
        with self._using():
            self._db.execute("BEGIN")
            try:
                self._db.execute("INSERT OR IGNORE INTO intents VALUES (?, ?)", (run_id, metric))
                if result is not None:
                    self._db.execute(
                        "INSERT OR REPLACE INTO kept VALUES (?, ?, ?)", (run_id, metric, result)
                    )
            except BaseException:
                if self._db.in_transaction:  # SQLite rolls some failures back itself
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def kept(self, run_id: str) -> dict[str, str]:
        """``{metric: result JSON}`` of a run's results judged but not settled yet."""
        with self._using():
            rows = self._db.execute("SELECT metric, result FROM kept WHERE run_id = ?", (run_id,))
            return dict(rows.fetchall())

    def drop_kept(self, run_id: str, metric: str) -> None:
        """Forget a kept result (one that can no longer be read): the pair is judged again."""
        with self._using():
            self._db.execute("DELETE FROM kept WHERE run_id = ? AND metric = ?", (run_id, metric))

    def unsettled(self) -> dict[str, str]:
        """Runs an earlier run left with unsettled work: ``{run_id: why}``.

        ``"langsmith"``: a feedback was being sent (a kept result, or an intent to confirm);
        ``"judge"``: a judge failure waits for its next attempt.
        """
        with self._using():
            judge = self._db.execute("SELECT DISTINCT run_id FROM attempts").fetchall()
            sent = self._db.execute(
                "SELECT run_id FROM intents UNION SELECT run_id FROM kept"
            ).fetchall()
        found = {run_id: "judge" for (run_id,) in judge}
        found.update({run_id: "langsmith" for (run_id,) in sent})
        return found

    def intended(self, run_id: str) -> set[str]:
        """Metrics of a run whose feedback was being sent when the last worker stopped."""
        with self._using():
            rows = self._db.execute("SELECT metric FROM intents WHERE run_id = ?", (run_id,))
            return {metric for (metric,) in rows.fetchall()}

    def failed_attempt(self, run_id: str, metric: str) -> int:
        """Count one more failure of a pair; returns the failures so far."""
        with self._using():
            self._db.execute(
                "INSERT INTO attempts VALUES (?, ?, 1) ON CONFLICT(run_id, metric) "
                "DO UPDATE SET failures = failures + 1",
                (run_id, metric),
            )
            row = self._db.execute(
                "SELECT failures FROM attempts WHERE run_id = ? AND metric = ?", (run_id, metric)
            ).fetchone()
        return int(row[0])

    def prune(self, before: float, *, spare: Iterable[str] = ()) -> int:
        """Delete the pairs settled before ``before`` (epoch seconds) and their attempts.

        Only settled pairs go: intents, kept results and the failure counts of unsettled
        pairs are work owed to LangSmith. A run with any of those, or in ``spare`` (runs the
        caller still has unsent), keeps every pair, since it is read again by id whatever its
        age. One transaction; the cutoff is recorded when something was deleted.

        Returns:
            The settled pairs deleted.
        """
        with self._using():
            self._db.execute("BEGIN")
            try:
                deleted = self._prune(before, set(spare))
            except BaseException:
                if self._db.in_transaction:  # SQLite rolls some failures back itself
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return deleted

    def _prune(self, before: float, spare: set[str]) -> int:
        """:meth:`prune` inside its transaction (the lock held)."""
        db = self._db
        db.execute("CREATE TEMP TABLE IF NOT EXISTS spared (run_id TEXT PRIMARY KEY)")
        db.execute("DELETE FROM spared")
        db.executemany("INSERT OR IGNORE INTO spared VALUES (?)", ((r,) for r in spare))
        db.execute(
            "INSERT OR IGNORE INTO spared SELECT run_id FROM intents UNION SELECT run_id "
            "FROM kept UNION SELECT run_id FROM attempts AS a WHERE NOT EXISTS (SELECT 1 "
            "FROM settled AS s WHERE s.run_id = a.run_id AND s.metric = a.metric)"
        )
        db.execute(
            "DELETE FROM attempts WHERE run_id NOT IN (SELECT run_id FROM spared) AND EXISTS "
            "(SELECT 1 FROM settled AS s WHERE s.run_id = attempts.run_id "
            "AND s.metric = attempts.metric AND s.settled_at < ?)",
            (before,),
        )
        deleted = db.execute(
            "DELETE FROM settled WHERE settled_at < ? "
            "AND run_id NOT IN (SELECT run_id FROM spared)",
            (before,),
        ).rowcount
        db.execute("DELETE FROM spared")
        if deleted:
            row = db.execute("SELECT value FROM meta WHERE key = 'pruned_before'").fetchone()
            latest = before if row is None else max(before, float(row[0]))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('pruned_before', ?)", (repr(latest),))
        return int(deleted)

    def pruned_before(self) -> float | None:
        """The latest cutoff (epoch seconds) that deleted settled pairs, None if none did.

        Runs that started before it may have pairs the file no longer holds.
        """
        with self._using():
            row = self._db.execute("SELECT value FROM meta WHERE key = 'pruned_before'").fetchone()
        return None if row is None else float(row[0])

    def count(self) -> int:
        """Settled pairs in the file."""
        with self._using():
            return int(self._db.execute("SELECT COUNT(*) FROM settled").fetchone()[0])

    def close(self) -> None:
        """Close the file and let the next run have it (idempotent)."""
        with self._lock:
            self._db.close()
            self._held.close()
