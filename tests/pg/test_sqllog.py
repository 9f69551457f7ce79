"""-v's statement classes: values left out, each class said once per run (-v), every
statement at DEBUG (-vv), nothing computed when neither is on."""

from __future__ import annotations

import logging

import pytest
from psycopg import sql

from pgblobdump.pg import sqllog
from pgblobdump.pg.target import APPLICATION_NAME, set_application_name


def test_a_class_leaves_values_out() -> None:
    assert sqllog.statement_class("SELECT lo_from_bytea(16384, '\\x00ff')") == (
        "SELECT lo_from_bytea(N, ?)"
    )
    q = sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier("r"), sql.Literal("hunter2"))
    assert "hunter2" not in sqllog.statement_class(q)
    long = "SELECT " + ", ".join(f"c{i}" for i in range(100)) + " FROM t"
    cls = sqllog.statement_class(long)
    assert len(cls) == sqllog.HEAD and cls.endswith("..."), cls
    assert sqllog.statement_class(b"COPY   t\n  FROM STDIN") == "COPY t FROM STDIN"


def _said(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == sqllog.log.name]


def test_once_per_run_at_info_every_time_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    set_application_name("pgblobdump test")  # a new run
    try:
        with caplog.at_level(logging.INFO, logger="pgblobdump"):
            sqllog.note("SELECT 1", None)
            sqllog.note("SELECT 2", None)  # the same class
        assert _said(caplog) == [(logging.INFO, "SQL: SELECT N")]
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="pgblobdump"):
            sqllog.note("SELECT 3", None)
        assert _said(caplog) == [(logging.DEBUG, "SQL: SELECT N")]
        caplog.clear()
        set_application_name("pgblobdump test")  # the next run says it again
        with caplog.at_level(logging.INFO, logger="pgblobdump"):
            sqllog.note("SELECT 4", None)
        assert _said(caplog) == [(logging.INFO, "SQL: SELECT N")]
    finally:
        set_application_name(APPLICATION_NAME)


class _Unreadable:
    def __str__(self) -> str:
        raise AssertionError("a statement was looked at with -v off")


def test_nothing_when_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pgblobdump"):
        sqllog.note(_Unreadable(), None)
    assert _said(caplog) == []
