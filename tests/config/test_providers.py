"""An 'openai' provider's base_url without a version segment (/v1) gets a warning with the fix
(`gateway check`), never an error: some servers serve the API at their root."""

from __future__ import annotations

import pytest

from gateway.config import ProviderConfig


def warning(base_url: str) -> str | None:
    return ProviderConfig(type="openai", base_url=base_url).unversioned_base_url()


@pytest.mark.parametrize(
    "url",
    [
        "https://api.openai.com/v1",
        "http://127.0.0.1:8000/v1/",
        "https://api.groq.com/openai/v1",
        "https://my.openai.azure.com/openai/v1",  # Azure OpenAI's v1 API
        "https://generativelanguage.googleapis.com/v1beta/openai/",  # a version, then more
        "https://example.com/api/v2",
    ],
)
def test_a_versioned_path_passes_quietly(url: str) -> None:
    assert warning(url) is None


def test_a_bare_host_says_where_requests_go_and_the_fix() -> None:
    said = warning("http://127.0.0.1:8000/")
    assert said is not None
    assert "base_url http://127.0.0.1:8000 has no version segment such as /v1" in said
    assert "chat requests go to http://127.0.0.1:8000/chat/completions" in said
    assert "use http://127.0.0.1:8000/v1" in said


def test_a_path_without_a_version_gets_v1_after_it_query_kept() -> None:
    said = warning("https://example.com/proxy?tag=x")
    assert said is not None and "use https://example.com/proxy/v1?tag=x" in said


def test_an_azure_deployment_url_is_pointed_at_azures_v1_api() -> None:
    said = warning("https://my.openai.azure.com/openai/deployments/gpt4o")
    assert said is not None
    assert "use Azure's v1 API, https://my.openai.azure.com/openai/v1, with the deployment's " in (
        said
    )


def test_the_demo_provider_has_no_url_to_check() -> None:
    assert ProviderConfig(type="demo").unversioned_base_url() is None
