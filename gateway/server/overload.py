"""Shedding optional work under load: past a policy's `overload.max_in_flight`, retrieval and
compression are skipped (answers still go out, ungrounded or uncompressed) before anything
has to be refused."""

from __future__ import annotations

from gateway.config.policy_file import Work
from gateway.context import RequestContext


def sheds(ctx: RequestContext, work: Work) -> bool:
    """True when this request should skip `work`; noted on the request (header, metric)."""
    policy = ctx.policy
    if policy is None:
        return False
    limit = policy.overload.max_in_flight
    if limit is None or ctx.in_flight <= limit or work not in policy.overload.skip:
        return False
    ctx.shed.append(work)
    return True
