"""The semantic cache: exact tier, semantic tier inside an exact scope, persistent store."""
