"""``pgblobdump generate``: create many LOs fast."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from pgblobdump.cli.completion import complete_major
from pgblobdump.cli.options import connection_options, output_options
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.progress import note, reporter
from pgblobdump.cli.types import COUNT, Parsed
from pgblobdump.errors import UsageError
from pgblobdump.generate.spec import Content, GenerateSpec, SizeDist, SizeSpec
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report import Column, Table
from pgblobdump.report.table import jsonable
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.units import format_bytes

if TYPE_CHECKING:  # the generator (and libpq) is imported by a run, not by --help
    from pgblobdump.generate.estimate import Estimate
    from pgblobdump.generate.generator import GenerateResult


def record_table(r: GenerateResult) -> Table:
    """The result as one row of raw values (bytes, OIDs, rates), for CSV and Markdown."""
    record = {**jsonable(r), "los_per_second": round(r.los_per_second, 1),
              "mb_per_second": round(r.mb_per_second, 2)}  # fmt: skip
    record["owners"] = " ".join(r.owners)
    record["seconds"] = round(r.seconds, 3)
    return Table([Column(k) for k in record], [record], title="generated")


def result_table(r: GenerateResult) -> Table:
    rows = [
        {"what": "large objects", "value": f"{r.count:,}"},
        {"what": "bytes", "value": f"{r.total_bytes:,} ({format_bytes(r.total_bytes)})"},
        {"what": "seconds", "value": f"{r.seconds:.2f} s"},
        {"what": "LOs/s", "value": f"{r.los_per_second:,.0f}"},
        {
            "what": "bytes/s",
            "value": f"{format_bytes(r.total_bytes / r.seconds if r.seconds > 0 else 0)}/s",
        },
        {"what": "OIDs", "value": f"{r.first_oid}..{r.last_oid}" if r.count else "-"},
        {"what": "owning table", "value": r.table or "-"},
        {"what": "owners", "value": ", ".join(r.owners) or "connecting user"},
        {"what": "LOs with GRANTs", "value": f"{r.grants:,}"},
        {"what": "LOs with comments", "value": f"{r.comments:,}"},
        {"what": "sparse LOs", "value": f"{r.sparse:,}"},
    ]
    return Table([Column("what"), Column("value")], rows, title="generated")


SAY_SIZE_ABOVE = 1024**3
"""A run planned to write more than this says how much on stderr before it starts."""


def size_note(e: Estimate, seed: int) -> str:
    """What a run will write, for a person deciding whether to let it go on."""
    if not e.exact:
        return (f"this run writes about {format_bytes(e.size)} of LOs ({e.count:,} LOs: the"
                " size distribution's expected value; the draws decide); the database grows"
                " by about as much")  # fmt: skip
    holes = f" ({format_bytes(e.stored)} stored: holes take no space)" if e.stored < e.size else ""
    return (f"this run writes {format_bytes(e.size)} of LOs{holes}, exact for {e.count:,} LOs"
            f" at --seed {seed}; the database grows by about as much")  # fmt: skip


REALISTIC_SIZES = SizeDist(16 * 1024, 2.5, 1024**3)
"""--preset realistic's sizes: median 16 KiB, 5% over 1 MiB, 1 in 2,300 over 64 MiB."""


@contextlib.contextmanager
def _target(target: ConnectionTarget, embedded: int | None) -> Iterator[str]:
    if embedded is None:
        yield target.conninfo()
        return
    if target.given:
        raise UsageError("--embedded starts its own server: give it no -d, -h, -p or -U")
    with EmbeddedCluster(embedded) as c:
        note(f"using a throwaway PostgreSQL {c.tc.version} cluster")
        yield c.conninfo()


@click.command()
@connection_options
@click.option(
    "-n",
    "--count",
    type=COUNT,
    default="1000",
    show_default=True,
    help="How many LOs (1000, 100k, 1M).",
)
@click.option(
    "--size",
    type=Parsed("size", lambda text, _flag: SizeSpec.parse(text)),
    default="0",
    show_default=True,
    help="LO size: fixed (0, 4KiB) or a log-uniform range (1KiB-64KiB).",
)
@click.option(
    "--size-dist",
    type=Parsed("lognormal:MEDIAN[:SIGMA[:MAX]]", lambda text, _flag: SizeDist.parse(text)),
    help="Draw sizes log-normal instead: median, sigma (2.5), clip (1GiB);"
    " e.g. lognormal:16KiB. Not with --size.",
)
@click.option(
    "--sparse",
    "sparse_fraction",
    type=float,
    default=0.0,
    show_default=True,
    help="Share of LOs of 8 KiB or more (0..1) written with holes (missing pages).",
)
@click.option(
    "--preset",
    type=click.Choice(["realistic"]),
    help="realistic: --size-dist lognormal:16KiB:2.5:1GiB --content mixed --owners 3"
    " --grants 0.1 --comments 0.05 --sparse 0.05 (options given too win).",
)
@click.option(
    "--content",
    type=click.Choice([c.value for c in Content]),
    default="random",
    show_default=True,
    help="zeros (compressible), random (incompressible), text, mixed (half text).",
)
@click.option("--table", help="Create this owning table (id, lo oid, size, name), a row per LO.")
@click.option(
    "--owners",
    type=int,
    default=0,
    show_default=True,
    help="Spread LOs over this many owner roles pgbd_owner_1.. (0: you own all).",
)
@click.option(
    "--grants",
    "grant_fraction",
    type=float,
    default=0.0,
    show_default=True,
    help="Share of LOs (0..1) that get a GRANT to pgbd_reader or pgbd_writer.",
)
@click.option(
    "--comments",
    "comment_fraction",
    type=float,
    default=0.0,
    show_default=True,
    help="Share of LOs (0..1) that get a COMMENT.",
)
@click.option("--start-oid", type=int, help="First OID (consecutive OIDs follow); may be >= 2^31.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for sizes and bytes.")
@click.option(
    "--embedded",
    type=int,
    metavar="MAJOR",
    shell_complete=complete_major,
    help="Use a throwaway embedded cluster of this major instead of a server.",
)
@click.option(
    "--no-cleanup", is_flag=True, help="On failure, leave what was created instead of removing it."
)
@output_options
def generate(
    target: ConnectionTarget,
    count: int,
    size: SizeSpec,
    size_dist: SizeDist | None,
    sparse_fraction: float,
    preset: str | None,
    content: str,
    table: str | None,
    owners: int,
    grant_fraction: float,
    comment_fraction: float,
    start_oid: int | None,
    seed: int,
    embedded: int | None,
    no_cleanup: bool,
    fmt: Format,
) -> None:
    """Create many large objects fast, with sizes, content, owners, ACLs and comments.

    Empty LOs with nothing else go through the server's own fastest path
    (lo_create over generate_series); otherwise each batch of up to 1000 LOs is one
    lo_from_bytea statement. Batches commit separately, so any count works at default
    lock settings. On failure, Ctrl-C or SIGTERM exactly what this run created is removed;
    concurrent runs get disjoint OID ranges.

    Example: pgblobdump generate -d mydb -n 100k --size 4KiB --table docs --owners 3
    --grants 0.1 --comments 0.01

    Users' data: pgblobdump generate -d mydb -n 10k --preset realistic (writes 2.9 GiB)

    A run of more than 1 GiB says how much it writes on stderr before it starts.
    """
    from pgblobdump.generate.estimate import estimate
    from pgblobdump.generate.generator import generate as run

    if preset == "realistic":
        # The preset fills only what the command line left at its default.
        ctx = click.get_current_context()

        def default(name: str) -> bool:
            return ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT

        if size_dist is None and default("size"):
            size_dist = REALISTIC_SIZES
        content = "mixed" if default("content") else content
        owners = 3 if default("owners") else owners
        grant_fraction = 0.1 if default("grant_fraction") else grant_fraction
        comment_fraction = 0.05 if default("comment_fraction") else comment_fraction
        sparse_fraction = 0.05 if default("sparse_fraction") else sparse_fraction
    spec = GenerateSpec(
        count=count,
        size=size,
        size_dist=size_dist,
        sparse_fraction=sparse_fraction,
        content=Content(content),
        table=table,
        owners=owners,
        grant_fraction=grant_fraction,
        comment_fraction=comment_fraction,
        start_oid=start_oid,
        seed=seed,
    )
    planned = estimate(spec)
    if planned.size > SAY_SIZE_ABOVE:
        note(size_note(planned, seed))
    with _target(target, embedded) as conninfo, reporter("creating LOs", spec.count) as rep:
        fixed = spec.size.low == spec.size.high and spec.size_dist is None
        if fixed and not spec.sparse_fraction:  # else the bytes are known only once drawn
            rep.totals(spec.count, spec.count * spec.size.low)
        result = run(conninfo, spec, rep, cleanup=not no_cleanup)
    # People get a vertical summary; CSV and Markdown get one row of raw values.
    emit(result_table(result) if fmt is Format.TABLE else record_table(result), fmt, result)
