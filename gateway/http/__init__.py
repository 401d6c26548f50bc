"""The HTTP edge: thin handlers over the pipeline, one error middleware, SSE rendering."""
