"""bench/routing_data.py: the datasets' loaders, the conversation prompts, the curve maths."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from routing_data import (
    EXEMPLARS,
    GENERAL,
    WORD_PROBLEMS,
    DatasetError,
    apgr,
    best_share,
    body_of,
    kept_curve,
    load_csv,
    load_gsm8k,
    load_mmlu,
    load_team,
    random_curve,
    spearman,
    task_text,
    word_problem_difficulty,
)

from gateway.routing.features import extract

DATA = Path(__file__).parent / "data"

# ---------------------------------------------------------------- curves


def test_the_random_curve_is_the_mean_over_every_choice_of_prompts() -> None:
    cheap = np.array([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    strong = np.array([1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    n = len(cheap)
    curve = random_curve(n, cheap, strong)
    for k in range(n + 1):
        mixes = [
            sum(cheap[i] if i in chosen else strong[i] for i in range(n))
            for chosen in map(set, itertools.combinations(range(n), k))
        ]
        assert curve[k] == pytest.approx(np.mean(mixes) / strong.sum())


def test_a_perfect_oracle_keeps_everything_up_to_the_cheap_models_accuracy() -> None:
    rng = np.random.default_rng(0)
    cheap = (rng.random(200) < 0.7).astype(float)
    strong = np.ones(200)
    oracle = strong - cheap  # 0 where the cheap model is right: those go cheap first
    curve = kept_curve(oracle, cheap, strong)
    right = int(cheap.sum())
    assert np.all(curve[: right + 1] == 1.0)
    assert curve[right + 1] < 1.0
    assert best_share(curve, 1.0) == pytest.approx(right / 200)
    assert curve[-1] == pytest.approx(cheap.mean())
    # After the cheap model's right answers, each prompt sent cheap loses one answer.
    assert np.allclose(np.diff(curve[right:]), -1 / 200)
    assert apgr(curve, cheap, strong) > apgr(random_curve(200, cheap, strong), cheap, strong)


def test_a_router_that_cannot_tell_prompts_apart_is_random() -> None:
    rng = np.random.default_rng(1)
    cheap, strong = rng.random(50) < 0.5, rng.random(50) < 0.9
    flat = kept_curve(np.zeros(50), cheap, strong)
    assert np.allclose(flat, random_curve(50, cheap.astype(float), strong.astype(float)))
    assert apgr(flat, cheap.astype(float), strong.astype(float)) == pytest.approx(0.5)


def test_judge_scores_make_a_curve_as_correctness_does() -> None:
    cheap = np.array([9.0, 3.0, 8.0, 2.0])
    strong = np.array([9.0, 9.0, 8.0, 8.0])
    curve = kept_curve(np.array([0.1, 0.9, 0.2, 0.8]), cheap, strong)
    assert curve.tolist() == pytest.approx([1.0, 1.0, 1.0, 28 / 34, 22 / 34])


def test_spearman_reads_ranks_not_values() -> None:
    assert spearman(np.array([1.0, 2.0, 3.0, 10.0]), np.array([0.1, 0.2, 0.3, 0.4])) == 1.0
    assert spearman(np.array([3.0, 2.0, 1.0]), np.array([1.0, 2.0, 3.0])) == -1.0
    assert np.isnan(spearman(np.ones(5), np.arange(5.0)))


# ---------------------------------------------------------------- conversations


def test_a_json_list_of_strings_is_the_users_turns() -> None:
    request = body_of(json.dumps(["Plan a trip to Rome.", "Now make it three days shorter."]))
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user"]
    assert task_text(request) == "Now make it three days shorter."
    assert extract(request).depth > extract(body_of("Plan a trip to Rome.")).depth


def test_a_json_list_of_messages_is_used_as_it_comes() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert body_of(json.dumps(messages)) == {"messages": messages}
    ends_with_reply = [*messages, {"role": "assistant", "content": "Hello"}]
    assert task_text(body_of(json.dumps(ends_with_reply))) is None  # nothing to embed


@pytest.mark.parametrize("text", ["[1, 2, 3]", "[draft] fix my essay", "[]", '["a", 1]'])
def test_text_that_is_not_a_list_of_turns_is_one_user_message(text: str) -> None:
    assert body_of(text) == {"messages": [{"role": "user", "content": text}]}


# ---------------------------------------------------------------- loaders


def test_a_csv_with_judge_scores_and_conversations() -> None:
    d = load_csv(DATA / "conversations.csv", "cheap", "strong")
    assert len(d) == 31 and d.name == "conversations"
    assert d.cheap.min() >= 1 and d.strong.max() <= 10
    depths = [len(b["messages"]) for b in d.bodies]
    assert set(depths) == {1, 2, 3}  # plain text, system + user, two user turns
    by_note = load_csv(DATA / "conversations.csv", "cheap", "strong", group_column="note")
    assert set(by_note.groups) == {"easy", "hard", "ends on the assistant's prefill"}
    with pytest.raises(DatasetError, match="no column 'category'"):
        load_csv(DATA / "conversations.csv", "cheap", "strong", group_column="category")


def test_gsm8k_and_mmlu_shaped_files_load_with_subjects_as_groups() -> None:
    gsm8k = load_gsm8k(DATA / "gsm8k_fixture.csv")
    assert gsm8k.name == "gsm8k" and set(gsm8k.groups) == {"gsm8k"} and len(gsm8k) == 40
    assert set(np.unique(gsm8k.cheap)) <= {0.0, 1.0}
    mmlu = load_mmlu(DATA / "mmlu")
    assert mmlu.name == "mmlu" and len(mmlu) == 48
    assert sorted(set(mmlu.groups)) == ["cooking", "geometry"]
    geometry = mmlu.subset(mmlu.groups == "geometry")
    assert len(geometry) == 24 and all(p.endswith("Answer:") for p in geometry.prompts)


def test_the_team_sets_turn_difficulty_into_outcomes() -> None:
    team = load_team()
    assert set(team.groups) == {EXEMPLARS, WORD_PROBLEMS, GENERAL}
    assert team.difficulty is not None
    assert np.all((team.difficulty >= 0) & (team.difficulty <= 1))
    assert np.allclose(team.cheap, 1 - team.difficulty) and np.all(team.strong == 1)
    assert word_problem_difficulty(3) == pytest.approx(0.4)
    assert word_problem_difficulty(12) == 1.0


def test_bad_files_are_refused_naming_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such file"):
        load_csv(tmp_path / "absent.csv")
    with pytest.raises(DatasetError, match="no mmlu_"):
        load_mmlu(tmp_path)
    columns = tmp_path / "columns.csv"
    columns.write_text("prompt,a,b\nhi,True,True\n")
    with pytest.raises(DatasetError, match=r"no column 'cheap'.*it has prompt, a, b"):
        load_csv(columns, "cheap", "b")
    value = tmp_path / "value.csv"
    value.write_text("prompt,cheap,strong\nhi,True,True\nho,maybe,True\n")
    with pytest.raises(DatasetError, match="row 3, column 'cheap': 'maybe'"):
        load_csv(value, "cheap", "strong")
