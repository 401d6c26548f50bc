"""Hypothesis settings shared by the fuzz tests.

Deterministic by default (derandomized, no example database), so CI sees the same examples on
every run. FUZZ_EXAMPLES sets every fuzz test's example count for a longer run (e.g.
FUZZ_EXAMPLES=5000); FUZZ_RANDOM=1 draws new examples on each run.
"""

from __future__ import annotations

import contextlib
import os
import warnings

from hypothesis import HealthCheck, Phase, settings

# When a @given test fails, Hypothesis' pytest plugin imports hypothesis.extra._patching, which
# imports libcst, which trips a DeprecationWarning (mypy_extensions.TypedDict); with the
# project's filterwarnings=error that turns one failing example into an INTERNALERROR that
# ends the whole session. Import it now, with that warning silenced, so the later import is a
# no-op.
with warnings.catch_warnings(), contextlib.suppress(ImportError):  # no libcst: no patches
    warnings.simplefilter("ignore", DeprecationWarning)
    import hypothesis.extra._patching  # noqa: F401


def fuzz_settings(examples: int, **overrides: object) -> settings:
    """Hypothesis settings for one fuzz test: `examples` by default, FUZZ_EXAMPLES if set."""
    count = int(os.environ.get("FUZZ_EXAMPLES") or examples)
    randomize = os.environ.get("FUZZ_RANDOM") == "1"
    return settings(
        max_examples=count,
        deadline=None,
        derandomize=not randomize,
        database=None,
        print_blob=False,
        phases=[Phase.explicit, Phase.generate, Phase.target, Phase.shrink],
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
        ],
        **overrides,  # type: ignore[arg-type]
    )
