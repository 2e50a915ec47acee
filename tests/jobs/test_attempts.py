"""jobs.attempts: every attempt's error, bounded and storable, and the history as read back."""

import json

from jobs import attempts
from jobs.attempts import MESSAGE_LIMIT, TRACEBACK_LIMIT, describe, error_info, history
from jobs.models import Job


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - the point is to keep its traceback
        return caught


def test_an_error_keeps_its_class_message_and_the_end_of_a_long_traceback():
    info = error_info(raised(ValueError("start " + "x" * TRACEBACK_LIMIT)))
    assert info["class_path"] == "builtins.ValueError"
    assert len(info["message"]) == MESSAGE_LIMIT
    assert info["traceback"].startswith("…") and len(info["traceback"]) == TRACEBACK_LIMIT + 1
    assert info["traceback"].rstrip().endswith("x")  # the raising frame's message is kept


def test_what_a_database_cannot_store_is_shown_escaped():
    info = error_info(raised(ValueError("nul \x00 and \udc80 surrogate")))
    assert "\x00" not in info["message"] and "\\x00" in info["message"]
    assert "\\udc80" in info["message"]
    json.dumps(info).encode("utf-8")  # raises if anything unstorable is left
    assert error_info(raised(Unprintable()))["message"] == "<Unprintable whose str() failed>"


def test_a_message_without_an_exception_and_the_one_line_text():
    assert error_info(None) is None
    bare = error_info(None, message="by hand")
    assert bare == {"class_path": "", "message": "by hand", "traceback": ""}
    assert describe(bare) == "by hand"
    assert describe(error_info(raised(KeyError("k")))) == "KeyError: 'k'"
    assert describe(None) == ""


def test_history_reads_entries_as_either_database_returns_them():
    entry = {
        "attempt": 1,
        "worker": "w/1",
        "started_at": "2026-12-03T10:00:00",  # SQLite keeps naive UTC
        "finished_at": "2026-12-03T10:00:02+00:00",
        "outcome": "retrying",
        "reason": "error",
        "error": {"class_path": "builtins.ValueError", "message": "m", "traceback": ""},
    }
    for stored in ([entry], json.dumps([entry])):
        (read,) = history(Job(attempts_history=stored))
        assert read["started_at"].utcoffset().total_seconds() == 0
        assert (read["finished_at"] - read["started_at"]).total_seconds() == 2
        assert (read["outcome"], read["reason"], read["worker"]) == ("retrying", "error", "w/1")
    assert history(Job(attempts_history=None)) == []
    assert "jsonb_build_object" in attempts.append_sql("postgresql")
