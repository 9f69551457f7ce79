"""Result records as people read them (report/summary.py, the sync sentence, report/table's
cells): sizes in binary units, yes/no, all OIDs, nouns in the right number. JSON and CSV
keep the raw values (tests elsewhere)."""

from __future__ import annotations

from pgblobdump.cli.sync import sentence
from pgblobdump.report import Column, Table, to_csv, to_markdown
from pgblobdump.report.summary import summary_table


def _cells(record: dict[str, object]) -> dict[str, str]:
    return dict((w, v) for w, v in summary_table("t", record).cells())


def test_a_summary_shows_sizes_seconds_and_all_oids() -> None:
    cells = _cells({"los": 8000, "bytes": 47_254_453, "archive_bytes": 512, "seconds": 0.3949,
                    "oids": "0..4294967295", "damaged_oids": "", "snapshot": "0000-1"})  # fmt: skip
    assert cells == {"LOs": "8,000", "bytes": "45.1 MiB", "archive bytes": "512 B",
                     "seconds": "0.39 s", "OIDs": "all OIDs", "damaged OIDs": "-",
                     "snapshot": "0000-1"}  # fmt: skip
    assert _cells({"oids": "5..9"}) == {"OIDs": "5..9"}
    # an incremental dump's: the source's LOs and bytes at its snapshot
    assert _cells({"los_at_snapshot": 22_000, "bytes_at_snapshot": 1_017_990_636}) == {
        "LOs at snapshot": "22,000", "bytes at snapshot": "970.8 MiB"}  # fmt: skip
    assert _cells({"kept_pg_dump_files": True}) == {"kept pg_dump files": "yes"}  # pack's
    shown = summary_table("t", {"los": 1, "redone": 0}, unless_zero=("redone",)).cells()
    assert shown == [["LOs", "1"]]


def test_flags_and_lists_read_as_words_in_tables_and_stay_raw_in_csv() -> None:
    t = Table(
        [Column("name"), Column("ok"), Column("oids")],
        [{"name": "a", "ok": True, "oids": []}, {"name": "b", "ok": False, "oids": [1, 2]}],
    )
    assert t.cells() == [["a", "yes", "-"], ["b", "no", "1, 2"]]
    assert "True" not in to_markdown(t) and "[]" not in to_markdown(t)
    assert to_csv(t).splitlines()[1] == "a,True,[]"


def test_the_sync_line_is_a_sentence() -> None:
    record = {"new": 1, "rewrite": 10, "gone": 1, "conflicts": 0, "deleted_on_target": 0,
              "equal": 8000, "copied": 0, "bytes": 0, "deleted": 0, "seconds": 0.261,
              "method": "transaction ids since 759:759", "snapshot": "x"}  # fmt: skip
    assert sentence(record, True, False) == (
        "copy 1 new LO and 10 changed; 1 LO gone from the source, kept (--delete removes"
        " it); 8,000 equal already (0.26 s; changes found by transaction ids since 759:759)"
    )
    none = {**record, "new": 0, "rewrite": 0, "gone": 2, "deleted": 2, "conflicts": 1}
    assert sentence(none, False, True).startswith(
        "copied nothing; 2 LOs gone from the source, 2 deleted; 1 LO in conflict, left as"
        " they are; 8,000 equal already"
    )


def test_a_resumed_restore_says_what_it_kept_and_what_it_did_again() -> None:
    from pgblobdump.packed.restore.request import RestoreResult

    r = RestoreResult(los=10_000, bytes=0, skipped=32_768, seconds=1.0, redone=2_048)
    assert r.resumed() == (
        "resumed: kept the 32,768 LOs there already; restored the other 2,048 LOs the"
        " interrupted run was writing when it stopped (their batch never committed), and"
        " 7,952 LOs it had not begun"
    )
    assert RestoreResult(1, 0, 1, 1.0).resumed() == (
        "resumed: kept the 1 LO there already, and 1 LO it had not begun"
    )


def test_generate_says_its_rate_in_the_tables_unit() -> None:
    """MiB in every table and progress line: generate's rate was in MB/s."""
    from pgblobdump.cli.generate import result_table
    from pgblobdump.generate.generator import GenerateResult

    r = GenerateResult(10, 3 * 2**30, 2.0, 1, 10, None, (), 0, 0)
    cells = dict((w, v) for w, v in result_table(r).cells())
    assert cells["bytes"] == "3,221,225,472 (3.0 GiB)" and cells["bytes/s"] == "1.5 GiB/s"
    assert cells["seconds"] == "2.00 s" and "MB/s" not in cells


def test_compare_runs_say_sizes_in_binary_units() -> None:
    """compare's line after each run said '34.5 MB, 1 files' next to tables in MiB."""
    from pgblobdump.compare.runner import dumped_line

    assert dumped_line("[1/4] pg_dump 17 -Fc of 10 LOs", 1.24, 46080, 4 * 2**20, 1) == (
        "[1/4] pg_dump 17 -Fc of 10 LOs: 1.2 s, 45 MiB peak, 4.0 MiB, 1 file"
    )


def test_vacuum_names_what_it_kept_in_words() -> None:
    """The OIDs not this role's to unlink were a Python list; a dry run's line says when
    the young ones will be old enough."""
    from pgblobdump.cli.vacuum import dry_run_line, result_table
    from pgblobdump.vacuum.run import VacuumResult

    r = VacuumResult(
        database="db", los=5, orphans=4, removable=1, removed=0, young=1, not_owned=2,
        not_owned_sample=(2, 3), referenced_meanwhile=0, skipped=0, not_archived=0,
        archived=None, columns=1, batches=0, batch_size=400, seconds=0.5, dry_run=True,
        age="age from commit timestamps (track_commit_timestamp)",
        old_enough="each is old enough 1 h after the transaction that made it committed",
    )  # fmt: skip
    cells = dict((w, v) for w, v in result_table(r).cells())
    assert cells["kept: not this role's to unlink"] == "2 (OIDs 2, 3)"
    assert cells["kept: younger than --min-age"] == f"1 ({r.old_enough})"
    assert dry_run_line(r, 3600) == (
        "would remove 1 of 4 orphans; kept 1 as younger than --min-age 1 h and 2 as not this"
        f" role's to unlink ({r.old_enough})"
    )


def test_migrate_run_says_its_seconds_with_their_unit() -> None:
    from pgblobdump.cli.migrate import result_table
    from pgblobdump.migrate.options import RunResult

    r = RunResult(1, "public.docs.lo", "bytea", "done", False, 300, 0, 0, 0, 4, 0.0712,
                  "EXTERNAL", None, [])  # fmt: skip
    cells = dict((w, v) for w, v in result_table(r).cells())
    assert cells["seconds"] == "0.07 s" and cells["longest exclusive lock"] == "0.004 s"
