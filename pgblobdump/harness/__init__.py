"""What compare and bench share: spreads over repeats, machine facts, plots."""
