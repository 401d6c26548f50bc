"""The verified cache: how often a semantic hit is wrong, measured on live traffic, and kept
within the model's budget (docs/CACHE.md, "The verified cache").

A share of semantic hits is also asked of the upstream in the background (`sampler.py`), the
fresh answer is compared with the cached one (`judge.py`), and each verdict becomes an
`Observation` in the model's ledger (`ledger.py`: this process, or shared through Redis by
`redis_ledger.py`). From the ledger: the precision of the hits served, with a 95 % lower bound
(`estimate.py`), and the effective threshold that keeps the wrong share within budget
(`boundary.py`); an entry found wrong for a question is marked, and never served again for
that question or its neighbours. `verifier.py` ties it together for the cache stage.
"""
