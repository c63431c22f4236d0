"""Upper bounds of integers the agent sends: a value past the database column's
range (``memory_bytes: 1e30``) is a 400 naming the field, never an overflow (500)."""
BIGINT_MAX = 2**63 - 1  # PostgreSQL bigint (BigIntegerField, BigAutoField)
INT_MAX = 2**31 - 1  # PostgreSQL integer (IntegerField, PositiveIntegerField)
