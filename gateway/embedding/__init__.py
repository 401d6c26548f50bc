"""Text embedding, one service shared by the cache, the router and knowledge bases: the
embedders, the MiniLM files shipped in models/, and how they run (ONNX, batching, two stages)."""
