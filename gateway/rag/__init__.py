"""Knowledge bases (retrieval-augmented generation) and the degradation levels they decide."""
