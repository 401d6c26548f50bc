"""Guards on what models do: tool-call validation and repair, agent loops, long contexts."""
