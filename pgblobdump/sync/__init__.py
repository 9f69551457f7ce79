"""LOs database to database: ``copy`` (sync/copy.py: every LO, once, from one source
snapshot) and ``sync`` (sync/run.py: what changed since), streamed with no archive
between; their state lives in the target, in a schema of its own (sync/state.py). This
package's __init__ imports nothing, so that a sync with nothing to copy never loads
restore's writer."""
