"""``aclitem`` text as the server prints it (``grantee=privileges/grantor``), parsed into
grants, and ``aclitem[]`` literals built back from items."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pgblobdump.errors import CorruptArchive

LO_PRIVILEGES = {"r": "SELECT", "w": "UPDATE"}
"""The letters a large object's ACL can hold (aclitem's r and w)."""


@dataclass(frozen=True)
class AclItem:
    """One ``aclitem``: ``grantee`` None is PUBLIC; ``privileges`` as SQL words;
    ``grantable`` those granted WITH GRANT OPTION."""

    grantee: str | None
    privileges: tuple[str, ...]
    grantable: tuple[str, ...]
    grantor: str


def _name(text: str, at: int) -> tuple[str, int]:
    """A role name at ``text[at:]`` (possibly double-quoted, "" inside), and where it ends."""
    if at < len(text) and text[at] == '"':
        out, i = [], at + 1
        while i < len(text):
            if text[i] == '"':
                if i + 1 < len(text) and text[i + 1] == '"':
                    out.append('"')
                    i += 2
                    continue
                return "".join(out), i + 1
            out.append(text[i])
            i += 1
        raise ValueError("unterminated quoted name")
    i = at
    while i < len(text) and text[i] not in "=/":
        i += 1
    return text[at:i], i


def parse(item: str) -> AclItem:
    """``alice=r*w/bob`` -> AclItem("alice", ("SELECT", "UPDATE"), ("SELECT",), "bob")."""
    try:
        grantee, i = _name(item, 0)
        if item[i] != "=":
            raise ValueError("no '='")
        i += 1
        privileges: list[str] = []
        grantable: list[str] = []
        while i < len(item) and item[i] != "/":
            word = LO_PRIVILEGES[item[i]]
            privileges.append(word)
            if i + 1 < len(item) and item[i + 1] == "*":
                grantable.append(word)
                i += 1
            i += 1
        grantor, i = _name(item, i + 1)
        if i != len(item) or not grantor:
            raise ValueError("trailing text")
    except (ValueError, IndexError, KeyError) as e:
        raise CorruptArchive(f"ACL item {item!r} is not one a large object can have") from e
    return AclItem(grantee or None, tuple(privileges), tuple(grantable), grantor)


def array_literal(items: Sequence[str]) -> str:
    """``{"a=r/b","=rw/b"}``: an ``aclitem[]`` (or any text array) literal."""
    quoted = ('"' + i.replace("\\", "\\\\").replace('"', '\\"') + '"' for i in items)
    return "{" + ",".join(quoted) + "}"


_LETTERS = {word: letter for letter, word in LO_PRIVILEGES.items()}


def _putid(name: str) -> str:
    """A role name as aclitem output writes it (putid in acl.c): double-quoted, with ""
    for ", unless it is only letters, digits and underscores."""
    if name and all(c.isascii() and (c.isalnum() or c == "_") for c in name):
        return name
    return '"' + name.replace('"', '""') + '"'


def format_item(item: AclItem) -> str:
    """``alice=r*w/bob``: the text the server prints for ``item`` (``parse`` reversed)."""
    privs = "".join(
        _LETTERS[p] + ("*" if p in item.grantable else "")
        for p in ("SELECT", "UPDATE")
        if p in item.privileges
    )
    grantee = "" if item.grantee is None else _putid(item.grantee)
    return f"{grantee}={privs}/{_putid(item.grantor)}"
