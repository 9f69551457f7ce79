"""LO health and orphan clean-up: ``inspect`` (a report from the catalogs) and ``vacuum``
(remove the LOs nothing references, set-based and safe against concurrent writers)."""

from pgblobdump.vacuum.run import VacuumRequest, VacuumResult, vacuum

__all__ = ["VacuumRequest", "VacuumResult", "vacuum"]
