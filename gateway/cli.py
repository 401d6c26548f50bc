"""`gateway serve | check | schema | policy | cache stats | cache explain | kb ingest | route` (also
`python -m gateway`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import signal
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from gateway import __version__
from gateway.config import (
    DEFAULT_CONFIG_PATH,
    ConfigError,
    Settings,
    calibrated_threshold,
    load_settings,
)
from gateway.config.environment import UnsetVariable, no_tenant_can_sign_in, unset_variables
from gateway.config.policy_reach import unknown_match_names
from gateway.observability.logging_setup import configure_logging
from gateway.server.listen import ListenError, listen_problem
from gateway.util.sqlite import StoreUnopenable

if TYPE_CHECKING:
    from gateway.rag.ingest import IngestReport
    from gateway.upstream.health import ProviderHealth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gateway {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)
    serve.add_argument("--host", help="listen address (default: server.host from config)")
    serve.add_argument("--port", type=_port, help="listen port (default: server.port; 0 = any)")

    check = commands.add_parser("check", help="validate the config and its policies, and exit")
    check.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)
    check.add_argument(
        "--require-env",
        action="store_true",
        help="fail when a variable the config names is unset (run it where the gateway runs)",
    )
    check.add_argument(
        "--probe",
        action="store_true",
        help="also call each provider (its model list with the configured key, and one token "
        "of each model it does not list); fail on any fault, with the fix",
    )

    schema = commands.add_parser(
        "schema", help="write the JSON Schemas of config.yaml and of policy files (for editors)"
    )
    schema.add_argument("--out", type=Path, default=Path("schemas"), help="default: schemas/")

    policy = commands.add_parser("policy", help="show which policies apply to a request, and why")
    policy.add_argument("--tenant", required=True)
    policy.add_argument("--model", default="", help="as clients send it (default: none)")
    policy.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)

    cache = commands.add_parser(
        "cache", help="look at the cache store, or explain the hit decision for two texts"
    )
    cache.add_argument("action", choices=["stats", "explain"])
    cache.add_argument(
        "texts",
        nargs="*",
        metavar="TEXT",
        help="explain: the stored question, then the asked one",
    )
    cache.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)
    cache.add_argument(
        "--url",
        help="ask a running gateway (e.g. http://127.0.0.1:8080) for its stats, verification "
        "included: GET /admin/cache/stats, which needs that gateway's admin key, read from the "
        "variable the config's auth.admin_key_env names (GATEWAY_ADMIN_KEY as shipped) or "
        "from --admin-key-env",
    )
    cache.add_argument(
        "--admin-key-env",
        metavar="NAME",
        help="with --url: the environment variable holding the admin key (default: the "
        "config's auth.admin_key_env); a variable, so the key stays out of the process list",
    )

    kb = commands.add_parser("kb", help="build embedded knowledge bases")
    kb_commands = kb.add_subparsers(dest="kb_command", required=True)
    kb_ingest = kb_commands.add_parser(
        "ingest", help="(re)build a knowledge base from a file or folder (.md, .txt, .html)"
    )
    kb_ingest.add_argument("name", help="a knowledge base under knowledge_bases: in the config")
    kb_ingest.add_argument("path", type=Path, help="the file or folder to ingest")
    kb_ingest.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)
    kb_ingest.add_argument("--quiet", action="store_true", help="no progress bar")

    route = commands.add_parser(
        "route", help="explain how a prompt would be routed, or what an alias's thresholds mean"
    )
    route.add_argument("prompt", nargs="?", help="the prompt to explain")
    route.add_argument(
        "--request",
        type=Path,
        metavar="FILE",
        help="instead of a prompt: a chat request body as a client sends it (JSON; - for "
        "stdin), scored as the gateway scores it (system prompt, history, tools included)",
    )
    route.add_argument(
        "--alias", help="a routing alias (default: the request's model, else the first)"
    )
    route.add_argument(
        "--tenant",
        help="whose policies apply, and tenant escalation (default: auth.anonymous_tenant "
        "with no keys, else config.yaml's aliases)",
    )
    route.add_argument(
        "--explain",
        "--explain-alias",
        dest="explain_alias",
        nargs="?",
        const="",
        metavar="ALIAS",
        help="with an alias, instead of a prompt: each tier's score cut per scoring variant, "
        "with the share and quality kept it gives on the calibration's reference data (with a "
        "prompt and no alias: the prompt's explanation, as without it)",
    )
    route.add_argument(
        "--prompts",
        type=Path,
        metavar="FILE",
        help="with --explain ALIAS: the share of these prompts each tier takes (one a line, "
        'or JSON Lines with a "prompt" field), scored with the configured embedder',
    )
    route.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)

    args = parser.parse_args(argv)
    if args.command == "route":
        _check_route_arguments(route, args)
    if args.command == "schema":
        return _write_schemas(args.out)
    try:
        settings = load_settings(args.config)
    except ConfigError as err:
        print(f"{err.source}: invalid configuration", file=sys.stderr)
        for problem in err.problems:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    if args.command == "check":
        return _check(settings, require_env=args.require_env, probe=args.probe)
    if args.command == "cache" and args.action == "explain":
        return _cache_explain(cache, settings, args.texts)
    if args.command == "cache":
        if args.admin_key_env is not None and args.url is None:
            cache.error("--admin-key-env goes with --url")
        return _cache_stats(settings, args.url, args.admin_key_env)
    if args.command == "policy":
        resolved = settings.policies.resolve(args.tenant, args.model)
        print(json.dumps(resolved.explain(), indent=2, ensure_ascii=False))
        return 0
    if args.command == "route" and args.explain_alias is not None:
        return _explain_alias(settings, args.explain_alias, args.prompts)
    if args.command == "route":
        return _route(settings, args)
    if args.command == "kb":
        return _kb_ingest(settings, args.name, args.path, quiet=args.quiet)
    return _serve(settings, args.host, args.port)


def _check(settings: Settings, *, require_env: bool = False, probe: bool = False) -> int:
    if _check_hooks(settings) or _check_routing(settings):
        return 1
    unset = unset_variables(settings.file)
    if require_env and unset:
        print(f"{settings.source}: environment incomplete (--require-env)", file=sys.stderr)
        _print_unset(settings, unset, every="error")
        return 1
    served = settings.served_models()
    providers = len(settings.providers)
    policies = len(settings.policies.policies)
    print(
        f"{settings.source}: OK ({len(served)} servable models, {providers} providers, "
        f"{policies} policies)"
    )
    _print_unset(settings, unset)
    _print_unservable_aliases(settings)
    for line in unknown_match_names(settings):
        print(f"  note: {line}", flush=True)
    if any(v.serious for v in unset):
        print(
            "  (a variable set only where the gateway runs is fine: check there with "
            "--require-env to fail on any unset one)",
            flush=True,
        )
    embedder = settings.file.cache.embedder
    if calibrated_threshold(embedder) is None:
        print(
            f"  note: embedder {embedder.type}:{embedder.model} has no calibrated similarity "
            "threshold; 0.95 applies unless set (calibrate with bench/cache_quality.py)"
        )
    _check_embedder(settings)
    _check_knowledge_bases(settings)
    _check_base_urls(settings)
    _check_exposure(settings)
    return _probe_providers(settings) if probe else 0


def _check_exposure(settings: Settings) -> None:
    """What `serve` would refuse on the configured host (--host may still choose another)."""
    from gateway.server.exposure import open_to_anyone, reaches_other_machines

    host = settings.server.host
    if reaches_other_machines(host) and (problem := open_to_anyone(settings.file.auth, host)):
        print(f"  warning: server.host: serve would be {problem}", file=sys.stderr, flush=True)


def _probe_providers(settings: Settings) -> int:
    """`check --probe`: each enabled provider called (upstream/health.py); 1 on any fault."""
    from gateway.upstream import Upstreams

    async def probe_all() -> list[tuple[str, ProviderHealth]]:
        upstreams = Upstreams(settings)
        try:
            names = upstreams.names()
            found = await asyncio.gather(*(upstreams.probe(n, confirm=True) for n in names))
            return list(zip(names, found, strict=True))
        finally:
            await upstreams.close()

    results = asyncio.run(probe_all())
    for name, health in results:
        if health.fix is None:
            print(f"  provider {name}: ok", flush=True)
        else:
            print(f"  error: provider {name}: {health.status}: {health.fix}", file=sys.stderr)
    return 0 if all(health.fix is None for _, health in results) else 1


def _check_embedder(settings: Settings) -> None:
    from gateway.cache.factory import cache_wanted, missing_package

    missing = missing_package(settings.file.cache.embedder) if cache_wanted(settings) else None
    if missing:
        print(
            f"  warning: cache.embedder type {settings.file.cache.embedder.type}: {missing}; "
            "until then the semantic tier is off (exact hits still work)",
            file=sys.stderr,
            flush=True,
        )


def _check_base_urls(settings: Settings) -> None:
    """A warning, not a failure: the URL may be right for a server of another shape."""
    for name, provider in settings.file.providers.items():
        if problem := provider.unversioned_base_url():
            print(f"  warning: providers.{name}: {problem}", file=sys.stderr, flush=True)


def _print_unset(settings: Settings, unset: list[UnsetVariable], every: str = "") -> None:
    """Warnings (callers refused, a door left open) on stderr, notes on stdout; `every`
    prints them all under one label instead."""
    for variable in unset:
        label = every or ("warning" if variable.serious else "note")
        stream = sys.stderr if every or variable.serious else sys.stdout
        print(f"  {label}: {variable.describe()}", file=stream, flush=True)
    if no_tenant_can_sign_in(settings.file, unset):
        print(
            "  warning: no key of auth.keys is set, so every request gets 401 (with no keys "
            "listed, every caller is auth.anonymous_tenant)",
            file=sys.stderr,
            flush=True,
        )


def _print_unservable_aliases(settings: Settings) -> None:
    served = set(settings.served_aliases())
    for alias, config in settings.routing.aliases.items():
        if alias not in served:
            tiers = ", ".join(t.model for t in config.tiers)
            print(
                f"  note: routing alias {alias!r} has no tier it can serve ({tiers}: their "
                "providers are disabled), so requests for it get 404",
                flush=True,
            )


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def _check_routing(settings: Settings) -> int:
    """Routing weights and exemplars are read here, so a bad name fails the check."""
    if not settings.routing.aliases:
        return 0
    from gateway.routing.scorer import ComplexityScorer
    from gateway.routing.thresholds import Thresholds

    try:
        scorer = ComplexityScorer(settings.routing.scoring)
    except (ValueError, ConfigError) as exc:
        print(f"  error: routing.scoring: {exc}", file=sys.stderr)
        return 1
    try:  # keep_quality and cheap_share through each variant's calibration: still in order?
        Thresholds(scorer.calibration).check(settings.routing.aliases, scorer.model.variants)
    except ValueError as exc:
        print(f"  error: {exc}", file=sys.stderr)
        return 1
    return 0


def _check_hooks(settings: Settings) -> int:
    """Tool-rule hooks are imported here, so a typo fails the check rather than requests."""
    from gateway.guard.rules import HookError, load_hook

    broken = 0
    for tool, rule in settings.guard.tools.rules.items():
        if rule.hook is None:
            continue
        try:
            load_hook(rule.hook)
        except HookError as exc:
            broken += 1
            print(f"  error: guard.tools.rules.{tool}.hook {rule.hook!r}: {exc}", file=sys.stderr)
    return 1 if broken else 0


def _check_knowledge_bases(settings: Settings) -> None:
    from gateway.rag.embedded import VersionError, kb_path, read_current, reingest_hint

    for name, kb in settings.knowledge_bases.items():
        if kb.type != "embedded":
            continue
        path = kb_path(name, kb)
        try:
            current = read_current(path)
        except VersionError as exc:
            print(
                f"  note: knowledge base '{name}' at {path} is unreadable ({exc}): "
                f"{reingest_hint(name)}"
            )
            continue
        if current is None:
            print(
                f"  note: knowledge base '{name}' is not ingested yet in {path} (its requests "
                f"are answered at level 3 until it is): run {reingest_hint(name)}"
            )


def _check_route_arguments(route: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.explain_alias == "":  # --explain alone: a prompt's explanation, what route gives
        if args.prompt is None and args.request is None:
            route.error("--explain takes an ALIAS (its thresholds), or goes with a prompt")
        args.explain_alias = None
    asked = args.prompt is not None or args.request is not None
    if args.explain_alias is None and not asked:
        route.error("give a prompt, --request FILE, or --explain ALIAS")
    if args.prompt is not None and args.request is not None:
        route.error("give a prompt or --request FILE, not both")
    if args.explain_alias is not None and (asked or args.alias or args.tenant):
        route.error("--explain ALIAS takes no prompt, --alias or --tenant (--prompts FILE instead)")
    if args.prompts is not None and args.explain_alias is None:
        route.error("--prompts goes with --explain ALIAS")


def _explain_alias(settings: Settings, alias: str, prompts: Path | None) -> int:
    from gateway.routing.alias_report import PromptsError, explain_alias

    aliases = settings.routing.aliases
    if alias not in aliases:
        known = ", ".join(aliases) or "none configured (routing.aliases)"
        hint = ' (to explain a prompt: gateway route "PROMPT")' if " " in alias else ""
        print(f"unknown routing alias {alias!r}; aliases: {known}{hint}", file=sys.stderr)
        return 2
    try:
        print(asyncio.run(explain_alias(settings, alias, prompts)))
    except PromptsError as exc:
        print(f"gateway: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"  error: {exc}", file=sys.stderr)
        return 1
    return 0


def _route(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.routing.explain import explain

    request: str | dict[str, object] = args.prompt
    if args.request is not None:
        try:
            text = sys.stdin.read() if str(args.request) == "-" else args.request.read_text()
            request = json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            print(f"gateway: --request {args.request}: {exc}", file=sys.stderr)
            return 2
        if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
            print(
                f"gateway: --request {args.request}: not a chat request body (an object with "
                '"messages")',
                file=sys.stderr,
            )
            return 2
    aliases = settings.routing.aliases
    model = request.get("model") if isinstance(request, dict) else None
    name = args.alias or (model if model in aliases else next(iter(aliases), None))
    if name is None or name not in aliases:
        known = ", ".join(aliases) or "none configured (routing.aliases)"
        print(f"unknown routing alias {args.alias!r}; aliases: {known}", file=sys.stderr)
        return 2
    tenant = args.tenant
    if tenant is None and not settings.file.auth.keys:  # every caller is this tenant
        tenant = settings.file.auth.anonymous_tenant
    print(asyncio.run(explain(settings, request, name, tenant)))
    return 0


def _cache_explain(parser: argparse.ArgumentParser, settings: Settings, texts: list[str]) -> int:
    """The hit decision for a stored and an asked text: cosine, vetoes, judge, verdict."""
    if len(texts) != 2:
        parser.error("cache explain takes two texts: the stored question, then the asked one")
    from gateway.cache.explain import explain

    for line in explain(settings.file.cache, texts[0], texts[1]).lines():
        print(line)
    return 0


def _cache_stats(settings: Settings, url: str | None, key_env: str | None = None) -> int:
    from gateway.cache.embedded_store import file_stats

    if url is not None:
        return _running_cache_stats(settings, url, key_env)
    store = settings.file.cache.store
    if store.type != "sqlite":
        print(
            "the cache store is not a file: ask the running gateway (gateway cache stats --url, "
            "or GET /admin/cache/stats)"
        )
        return 1
    stats = file_stats(store.path, store.max_entries, store.max_bytes)
    print(json.dumps({"path": store.path, **asdict(stats)}, indent=2))
    if not Path(store.path).exists():
        print(
            f"  note: no cache file at {store.path} yet: a gateway on {settings.source} makes "
            "it with its first cached answer (relative paths resolve beside the config)",
            file=sys.stderr,
        )
    return 0


def _running_cache_stats(settings: Settings, url: str, key_env: str | None) -> int:
    """GET /admin/cache/stats of a running gateway: its entries, then verification per model.
    The admin API needs the admin key: when it is missing or refused, say which and how."""
    import os
    import urllib.error
    import urllib.request

    from gateway.cache.stats_text import verification_lines

    target = url.rstrip("/") + "/admin/cache/stats"
    variable = key_env or settings.file.auth.admin_key_env
    key = os.environ.get(variable) if variable else None
    if not key:
        print(
            f"gateway: {target} needs the admin key: {_admin_key_fix(settings, variable)}",
            file=sys.stderr,
        )
        return 1
    headers = {"Authorization": f"Bearer {key}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(target, headers=headers)) as resp:
            stats = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        body = err.read().decode(errors="replace")
        if err.code in (401, 403):
            print(
                f"gateway: {target} answered {err.code}: {_refusal(body, variable)}",
                file=sys.stderr,
            )
        else:
            print(f"gateway: {target} answered {err.code}: {body}", file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as err:
        print(f"gateway: could not read {target}: {err}", file=sys.stderr)
        return 1
    verification = stats.pop("verification", {})
    print(json.dumps(stats, indent=2))
    print("\n".join(verification_lines(verification)))
    return 0


def _admin_key_fix(settings: Settings, variable: str | None) -> str:
    """How to give `cache stats --url` the admin key, when none was found."""
    if variable is None:
        return (
            f"{settings.source} names no auth.admin_key_env; put that gateway's admin key in a "
            "variable and name it with --admin-key-env NAME"
        )
    return (
        f"set {variable} to that gateway's admin key (the value of the variable its "
        "auth.admin_key_env names), or name another variable with --admin-key-env NAME"
    )


def _refusal(body: str, variable: str | None) -> str:
    """What a 401/403 from the admin API means for the key we sent."""
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    if code == "admin_disabled":
        return (
            "that gateway's admin API is off (the variable its auth.admin_key_env names is "
            "unset where it runs): set it there and restart, then pass the same key here"
        )
    return (
        f"the key in {variable} is not that gateway's admin key; set {variable} to it, or "
        "name the variable that holds it with --admin-key-env NAME"
    )


_SKIPPED_SHOWN = 20


def _kb_ingest(settings: Settings, name: str, source: Path, *, quiet: bool) -> int:
    from gateway.rag.embedded import kb_path
    from gateway.rag.ingest import IngestError

    config = settings.knowledge_bases.get(name)
    if config is None:
        known = ", ".join(sorted(settings.knowledge_bases)) or "none"
        print(
            f"gateway: no knowledge base '{name}' in {settings.source} (configured: {known})",
            file=sys.stderr,
        )
        return 2
    if config.type != "embedded":
        print(
            f"gateway: knowledge base '{name}' is type {config.type}: its retriever holds the "
            "documents; only embedded knowledge bases are ingested here",
            file=sys.stderr,
        )
        return 2
    if not source.exists():
        print(f"gateway: {source}: no such file or directory", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(_run_ingest(settings, name, source, progress=not quiet))
    except (IngestError, OSError) as err:
        print(f"gateway: ingest of '{name}' failed, nothing changed: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"gateway: ingest of '{name}' interrupted, nothing changed", file=sys.stderr)
        return 130
    skipped = f", {_count(len(report.skipped), 'file')} skipped" if report.skipped else ""
    print(
        f"Ingested {_count(report.documents, 'document')} into knowledge base '{name}': "
        f"{_count(report.chunks, 'chunk')}{skipped}, in {report.seconds:.1f} s. "
        f"Version {report.version_path.name} is now current in {kb_path(name, config)}; "
        f"a gateway running on {settings.source} picks it up within a second."
    )
    for path, reason in report.skipped[:_SKIPPED_SHOWN]:
        print(f"  skipped {path}: {reason}")
    if len(report.skipped) > _SKIPPED_SHOWN:
        print(f"  ... and {len(report.skipped) - _SKIPPED_SHOWN} more")
    return 0


async def _run_ingest(
    settings: Settings, name: str, source: Path, *, progress: bool
) -> IngestReport:
    from gateway.cache.factory import new_embedder
    from gateway.rag.embedded import kb_path
    from gateway.rag.ingest import ingest

    config = settings.knowledge_bases[name]
    embedder = new_embedder(settings.file.cache.embedder)  # the vectors the gateway compares
    try:
        await embedder.start()
        return await ingest(name, config, kb_path(name, config), source, embedder, progress)
    finally:
        await embedder.close()


def _data_files(settings: Settings) -> str:
    """Where this process keeps its files (absolute: resolved beside the config)."""
    from gateway.cache.factory import cache_wanted
    from gateway.rag.embedded import kb_path

    file = settings.file
    files = []
    if cache_wanted(settings) and file.cache.store.type == "sqlite":
        files.append(f"cache {file.cache.store.path}")
    if file.responses.store.type == "sqlite":
        files.append(f"responses {file.responses.store.path}")
    files += [
        f"knowledge base '{name}' {kb_path(name, kb)}"
        for name, kb in settings.knowledge_bases.items()
        if kb.type == "embedded"
    ]
    return ", ".join(files)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _write_schemas(out: Path) -> int:
    from gateway.config.json_schemas import SCHEMAS

    out.mkdir(parents=True, exist_ok=True)
    for name, make in SCHEMAS.items():
        path = out / name
        path.write_text(json.dumps(make(), indent=2, ensure_ascii=False) + "\n", "utf-8")
        print(f"wrote {path}")
    return 0


def _serve(settings: Settings, host: str | None, port: int | None) -> int:
    from gateway.util.threads import limit_blas_threads

    configure_logging()
    limit_blas_threads()
    if _check_routing(settings):  # unknown weights, cuts out of order: a line, not a traceback
        return 1
    from gateway.server.exposure import open_to_anyone, reaches_other_machines

    host = host or settings.server.host
    public = reaches_other_machines(host)
    if public and (problem := open_to_anyone(settings.file.auth, host)):
        print(f"gateway: {problem}", file=sys.stderr)
        return 1
    listen_port = settings.server.port if port is None else port
    try:
        with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=_loop) as runner:
            runner.run(_run(settings, host, listen_port, public=public))
    except (ListenError, StartupError) as err:
        print(f"gateway: {err}", file=sys.stderr)
        return 1
    return 0


class StartupError(RuntimeError):
    """The gateway cannot start (a store it cannot open): one line for the operator."""


def _tune_gc() -> None:
    """Start-up objects (config, models, tables) live for the whole process: freeze them out
    of the collector's scans, and collect the young generation less often under load."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def _loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


async def _run(settings: Settings, host: str, port: int, *, public: bool = False) -> None:
    from gateway.http.keys import CONNECTIONS, DRAIN, RELOADER
    from gateway.server.app import build_app
    from gateway.server.connections import BoundedSite, open_file_problem
    from gateway.server.shutdown import server_timeout

    app = build_app(settings)
    app[RELOADER].public_host = host if public else None  # no reload may drop the last key
    drain, server = app[DRAIN], settings.server  # server settings take a restart to change
    timeout = server_timeout(server.shutdown_timeout_seconds)  # ours acts first: Drain.ending
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, shutdown_timeout=timeout
    )
    try:
        await runner.setup()
    except StoreUnopenable as exc:  # before listening: say which file, not a traceback
        await runner.cleanup()
        raise StartupError(
            f"{exc}; make its directory writable by this user, or point the store's path in "
            f"{settings.source} (cache.store.path, responses.store.path) elsewhere"
        ) from None
    site = BoundedSite(runner, app[CONNECTIONS], host, port, backlog=1024)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ListenError(listen_problem(exc, host, port)) from None
    for address in runner.addresses:
        print(f"gateway {__version__} listening on http://{address[0]}:{address[1]}", flush=True)
    _print_unset(settings, unset_variables(settings.file))
    _print_unservable_aliases(settings)
    if problem := open_file_problem(settings.server.max_connections):
        print(f"  warning: {problem}", file=sys.stderr, flush=True)
    models = ", ".join(sorted(r.name for r in settings.served_models()))
    print(f"  serving models: {models}", flush=True)
    if aliases := settings.served_aliases():
        print(f"  routed aliases: {', '.join(sorted(aliases))}", flush=True)
    if files := _data_files(settings):
        print(f"  data: {files}", flush=True)
    if settings.server.tune_gc:
        _tune_gc()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    reloads: set[asyncio.Task[object]] = set()

    def reload_now() -> None:
        task = loop.create_task(app[RELOADER].reload())
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    loop.add_signal_handler(signal.SIGHUP, reload_now)
    try:
        await stop.wait()
        await drain.begin(server.drain_seconds)
    finally:
        async with drain.ending(server.shutdown_timeout_seconds):
            await runner.cleanup()  # stop accepting, wait for the requests, close
