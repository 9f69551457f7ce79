"""Create many large objects fast, with sizes, content, owners, ACLs, comments and a table."""

from pgblobdump.generate.generator import GenerateResult, generate
from pgblobdump.generate.spec import Content, GenerateSpec, SizeDist, SizeSpec

__all__ = ["Content", "GenerateResult", "GenerateSpec", "SizeDist", "SizeSpec", "generate"]
