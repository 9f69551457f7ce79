"""LO ACL entries: each LO's commands as pg_restore issues them, and the grants they make.

From archive 1.16 (pg_dump 17) one ``ACL`` entry serves a whole BLOB METADATA group: its
commands name the group's first OID, and pg_restore re-issues them once per LO of the
group (IssueACLPerBlob, for entries tagged ``LARGE OBJECTS a..b``). ``per_blob`` splits a
definition the way IssueACLPerBlob does; ``grants`` replays GRANT/REVOKE statements on an
LO's default privileges and gives the ACL the server ends up with, item by item as
``pg_largeobject_metadata.lomacl`` holds it; ``lo_grants`` does it once for all the LOs
whose statements differ in their OID only (a 1.16 group, or equal per-LO ACL entries).
"""

from __future__ import annotations

import re
from functools import lru_cache

from pgblobdump.aclitem import AclItem

LARGE_OBJECT = "LARGE OBJECT "
"""What ends a command's first half in IssueACLPerBlob (the OID follows)."""

Template = tuple[tuple[str, "str | None"], ...]
"""An ACL definition split by IssueACLPerBlob: per command (head, tail), restored for LO
``oid`` as ``head + str(oid) + tail + ";"``; tail None for a command naming no LO."""

_C_SPACE = " \t\n\r\f\v"
_DIGITS = "0123456789"


def per_blob(defn: str) -> Template:
    """``defn`` cut as IssueACLPerBlob cuts it: commands end at ``;`` outside double quotes
    (trailing text without one is dropped, as pg_restore drops it), the first half of each
    ends after ``LARGE OBJECT `` and the OID that follows is skipped."""
    out: list[tuple[str, str | None]] = []
    in_quotes = False
    st = en = 0
    head_end = -1
    st2: int | None = None
    n = len(defn)
    while en < n:
        c = defn[en]
        if c == '"':
            in_quotes = not in_quotes
        if in_quotes:
            en += 1
            continue
        if defn.startswith(LARGE_OBJECT, en):
            en += len(LARGE_OBJECT)
            if st2 is None:
                head_end = en  # C writes a NUL here: a second match does not move it
            en += 1  # the OID's first digit, overwritten by that NUL
            while en < n and defn[en] in _DIGITS:
                en += 1
            st2 = en
        elif c == ";":
            if st2 is None:
                out.append((defn[st:en], None))
            else:
                out.append((defn[st:head_end], defn[st2:en]))
            en += 1
            while en < n and defn[en] in _C_SPACE:
                en += 1
            st, st2 = en, None
        else:
            en += 1
    return tuple(out)


def commands(template: Template, oid: int) -> tuple[str, ...]:
    """The commands pg_restore issues for LO ``oid`` from a ``per_blob`` template.

    A command that names no LO (``SET SESSION AUTHORIZATION r;`` around the GRANTs of a
    grantor other than the owner) is given unchanged: pg_restore passes it a NULL second
    half, which is not a command anyone could want reproduced."""
    text = str(oid)
    return tuple(
        head + ";" if tail is None else head + text + tail + ";" for head, tail in template
    )


LO_ALL = ("SELECT", "UPDATE")
"""The privileges of a large object, in aclitem order (r, w)."""

_NAME = r'(?:"(?:[^"]|"")*"|[^\s;,"]+)'
_PRIVS = r"(ALL(?:\s+PRIVILEGES)?|(?:SELECT|UPDATE)(?:\s*,\s*(?:SELECT|UPDATE))*)"
_GRANT = re.compile(
    rf"GRANT\s+{_PRIVS}\s+ON\s+LARGE\s+OBJECT\s+\d+\s+TO\s+({_NAME})(\s+WITH\s+GRANT\s+OPTION)?"
    r"\s*;?\s*\Z",
    re.I,
)
_REVOKE = re.compile(
    rf"REVOKE\s+(GRANT\s+OPTION\s+FOR\s+)?{_PRIVS}\s+ON\s+LARGE\s+OBJECT\s+\d+\s+FROM\s+({_NAME})"
    r"(?:\s+(?:CASCADE|RESTRICT))?\s*;?\s*\Z",
    re.I,
)
_SET_AUTH = re.compile(rf"SET\s+SESSION\s+AUTHORIZATION\s+({_NAME})\s*;?\s*\Z", re.I)
_RESET_AUTH = re.compile(r"RESET\s+SESSION\s+AUTHORIZATION\s*;?\s*\Z", re.I)


def _role(name: str) -> str | None:
    """A role as written by fmtId: unquoted, ``""`` inside quotes; PUBLIC is None."""
    if name.startswith('"'):
        return name[1:-1].replace('""', '"')
    return None if name.upper() == "PUBLIC" else name.lower()


def _privileges(words: str) -> tuple[str, ...]:
    if words.upper().startswith("ALL"):
        return LO_ALL
    named = {w.strip().upper() for w in words.split(",")}
    return tuple(p for p in LO_ALL if p in named)


@lru_cache(maxsize=1024)
def grants(statements: tuple[str, ...], owner: str | None) -> tuple[AclItem, ...] | None:
    """The LO's ACL after ``statements`` (its GRANT/REVOKE commands, with any SET/RESET
    SESSION AUTHORIZATION around them) run on the default ``owner=rw/owner``, one AclItem
    per (grantee, grantor) in the order the server keeps them; ``()`` when there are no
    statements (default privileges, lomacl NULL); None if a statement is none of those.
    The grantor is the role the statement runs as: the owner, or the SET one."""
    if not statements:
        return ()
    me = owner or ""
    # (grantee, grantor) -> {privilege: with grant option}; dicts keep server order
    acl: dict[tuple[str | None, str], dict[str, bool]] = {(owner, me): dict.fromkeys(LO_ALL, False)}
    for stmt in statements:
        s = stmt.strip()
        if m := _GRANT.match(s):
            privs = acl.setdefault((_role(m.group(2)), me), {})
            for p in _privileges(m.group(1)):
                privs[p] = privs.get(p, False) or bool(m.group(3))
        elif m := _REVOKE.match(s):
            key = (_role(m.group(3)), me)
            privs = acl.get(key, {})
            for p in _privileges(m.group(2)):
                if p in privs:
                    if m.group(1):
                        privs[p] = False
                    else:
                        del privs[p]
            if key in acl and not privs:
                del acl[key]
        elif m := _SET_AUTH.match(s):
            me = _role(m.group(1)) or ""
        elif _RESET_AUTH.match(s):
            me = owner or ""
        else:
            return None
    return tuple(
        AclItem(
            grantee,
            tuple(p for p in LO_ALL if p in privs),
            tuple(p for p in LO_ALL if privs.get(p)),
            grantor,
        )
        for (grantee, grantor), privs in acl.items()
        if privs
    )


def grants_json(items: tuple[AclItem, ...] | None) -> list[dict[str, object]] | None:
    """``grants`` as JSON-ready records (the ``grants`` field of ``toc los --json``):
    grantee (None for PUBLIC), privileges, those WITH GRANT OPTION, grantor."""
    if items is None:
        return None
    return [
        {
            "grantee": i.grantee,
            "privileges": list(i.privileges),
            "with_grant_option": list(i.grantable),
            "grantor": i.grantor,
        }
        for i in items
    ]


LO_GRANTS_MAX = 1024
"""Distinct statement shapes whose grants lo_grants keeps (then it starts over)."""

_by_shape: dict[tuple[tuple[str, ...] | str, str | None], tuple[AclItem, ...] | None] = {}
_BLANKED = LARGE_OBJECT + "# "


def _blank(stmt: str, needle: str) -> str:
    """``stmt`` with the OID it names blanked: the first ``needle`` (``LARGE OBJECT
    <oid> ``) when no double quote comes before it, where GRANT and REVOKE name their
    object (only keywords precede it there; an unquoted role name has no space).
    Elsewhere (in a quoted role name) the text is kept, so two statements with one
    blanked form give the same grants whatever their OID."""
    if '"' in stmt:
        at = stmt.find(needle)
        if at < 0 or stmt.find('"', 0, at) >= 0:
            return stmt
    return stmt.replace(needle, _BLANKED, 1)


def lo_grants(
    statements: tuple[str, ...], owner: str | None, oid: int
) -> tuple[AclItem, ...] | None:
    """``grants(statements, owner)`` of LO ``oid``, whose statements name it: replayed
    once per shape (the statements with the OID blanked) and owner, and the same tuple
    given for every LO of that shape. The grants cannot depend on the OID, so a group
    of a 1.16 archive (whose ACL pg_restore re-issues per LO) is resolved once, and so
    are a 1.15 archive's per-LO ACL entries that differ in the OID alone."""
    if not statements:
        return ()
    needle = f"{LARGE_OBJECT}{oid} "
    if len(statements) == 1:  # the common case, at a few hundred ns an LO
        stmt = statements[0]
        shape: tuple[str, ...] | str = (
            stmt.replace(needle, _BLANKED, 1) if '"' not in stmt else _blank(stmt, needle)
        )
    else:
        shape = tuple([_blank(s, needle) for s in statements])
    key = (shape, owner)
    found = _by_shape.get(key, _UNSEEN)
    if found is _UNSEEN:
        found = grants(statements, owner)
        if len(_by_shape) >= LO_GRANTS_MAX:
            _by_shape.clear()
        _by_shape[key] = found
    return found  # type: ignore[return-value]


_UNSEEN = object()
