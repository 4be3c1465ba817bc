"""Prefix-aware choice: a conversation's turns go where its first went, within a bound on load."""

from __future__ import annotations

from collections import Counter
from typing import Any

from llmgw.gateway.upstream.choice import choose
from llmgw.gateway.upstream.prefix import Affinity, affinity, near, rank
from llmgw.gateway.upstream.table import Serving, Upstream
from tests.factories import gemma_model, remote_model


def replicas(*ids: str, load: int = 0) -> tuple[Upstream, ...]:
    return tuple(Upstream(i, f"http://127.0.0.1:{39000 + n}/v1", outstanding=load)
                 for n, i in enumerate(ids))


def conversation(n: int, turns: int) -> dict[str, Any]:
    """Conversation `n` after `turns` turns: its own long system prompt, then its history."""
    messages: list[dict[str, str]] = [
        {"role": "system", "content": f"You are agent {n}. " + "Follow the rules. " * 300}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"conversation {n}, question {t}"})
        messages.append({"role": "assistant", "content": f"answer {t}"})
    return {"model": "gemma3-270m", "messages": messages[:-1]}


def first_choice(payload: dict[str, Any], ups: tuple[Upstream, ...],
                 exclude: frozenset[str] = frozenset()) -> str:
    found = affinity(payload)
    assert found is not None
    chosen = near(ups, exclude, found, 0.0)
    assert chosen is not None
    return chosen[0].id


def test_a_prompt_json_cannot_render_has_no_affinity() -> None:
    assert affinity({"messages": [{"role": "user", "content": 2**70}]}) is None


def test_every_turn_of_a_conversation_goes_to_the_replica_its_first_went_to() -> None:
    ups = replicas("rep-a", "rep-b", "rep-c")
    for n in range(8):
        assert {first_choice(conversation(n, t), ups) for t in range(1, 7)} == \
            {first_choice(conversation(n, 1), ups)}


def test_different_conversations_spread_over_the_replicas() -> None:
    ups = replicas("rep-a", "rep-b")
    served = Counter(first_choice(conversation(n, 1), ups) for n in range(40))
    assert set(served) == {"rep-a", "rep-b"}
    assert max(served.values()) <= 28  # 70 %: rendezvous hashing spreads, it does not alternate


def test_the_same_conversation_chooses_alike_in_every_process() -> None:
    # Two sets of Upstream objects (two workers, two servers) with the same replicas: the
    # choice is a function of the prompt and the replicas' ids only.
    for n in range(8):
        assert first_choice(conversation(n, 3), replicas("rep-a", "rep-b", "rep-c")) == \
            first_choice(conversation(n, 3), replicas("rep-c", "rep-a", "rep-b")[::-1])


def test_a_popular_prefix_spreads_once_its_replica_is_over_the_bound() -> None:
    ups = replicas("rep-a", "rep-b")
    found = affinity(conversation(0, 1))
    assert found is not None
    # Every request has the same prefix; none finishes.
    for _ in range(20):
        chosen = near(ups, frozenset(), found, 0.0)
        assert chosen is not None
        chosen[0].outstanding += 1
    loads = sorted(up.outstanding for up in ups)
    # ceil(1.25 × 20 / 2) + 2 = 15 bounds the first in line: 15 of 20, not 20.
    assert loads == [5, 15]


def test_the_bound_passes_over_the_first_replica_and_says_why() -> None:
    ups = replicas("rep-a", "rep-b")
    found = affinity(conversation(1, 1))
    assert found is not None
    first = rank(found.key, ups)[0]
    first.outstanding = 6  # ceil(1.25 × 7 / 2) + 2 = 7: room for one more
    assert near(ups, frozenset(), found, 0.0) == (
        first, f"prefix of {found.blocks} blocks → {first.id} (rendezvous), load 6 < bound 7")
    first.outstanding = 7  # ceil(1.25 × 8 / 2) + 2 = 7: full
    chosen = near(ups, frozenset(), found, 0.0)
    assert chosen is not None
    up, why = chosen
    assert up is not first
    assert why == (f"prefix of {found.blocks} blocks → {up.id} (rendezvous), load 0 < bound 7; "
                   f"{first.id} first but at load 7")


def test_a_replica_gone_moves_only_the_conversations_it_served() -> None:
    three = replicas("rep-a", "rep-b", "rep-c")
    before = {n: first_choice(conversation(n, 1), three) for n in range(60)}
    two = tuple(up for up in three if up.id != "rep-b")
    after = {n: first_choice(conversation(n, 1), two) for n in range(60)}
    moved = {n for n in before if before[n] != after[n]}
    assert moved == {n for n in before if before[n] == "rep-b"} and moved


def test_a_new_replica_takes_only_its_share_from_the_others() -> None:
    two = replicas("rep-a", "rep-b")
    before = {n: first_choice(conversation(n, 1), two) for n in range(60)}
    three = (*two, Upstream("rep-new", "http://127.0.0.1:39009/v1"))
    after = {n: first_choice(conversation(n, 1), three) for n in range(60)}
    moved = {n for n in before if before[n] != after[n]}
    assert moved and all(after[n] == "rep-new" for n in moved)
    assert len(moved) < 35  # about a third of 60


def test_a_named_session_wins_over_the_prompt() -> None:
    ups = replicas("rep-a", "rep-b", "rep-c")
    sessions = {f"session-{i}": i for i in range(12)}
    for name in sessions:
        # Unrelated prompts of one session all go where the session goes.
        chosen = set()
        for n in range(6):
            found = affinity(conversation(n, 1), name)
            assert found == affinity({"prompt": "unrelated"}, name)
            assert found is not None and found.blocks == 0
            picked = near(ups, frozenset(), found, 0.0)
            assert picked is not None
            chosen.add(picked[0].id)
        assert len(chosen) == 1


def test_the_sdks_session_fields_name_a_session() -> None:
    header = affinity({"messages": []}, "s-1")
    assert affinity({"messages": [], "prompt_cache_key": "s-1"}) == header
    assert affinity({"messages": [], "metadata": {"user_id": "s-1"}}) == header
    assert affinity({"messages": [{"role": "user", "content": "hi"}]}) != header


def test_a_conversation_on_the_responses_and_messages_apis_keeps_its_head() -> None:
    system = "Be brief. " * 200
    first = affinity({"instructions": system, "input": [{"role": "user", "content": "q1"}]})
    later = affinity({"instructions": system, "input": [
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"}]})
    assert first == later
    anthropic = affinity({"system": system, "messages": [{"role": "user", "content": "q1"}]})
    assert anthropic is not None and anthropic != affinity(
        {"system": system, "messages": [{"role": "user", "content": "other"}]})


def test_a_recently_refused_replica_is_chosen_only_when_no_other_is_left() -> None:
    ups = replicas("rep-a", "rep-b")
    found = affinity(conversation(2, 1))
    assert found is not None
    first = rank(found.key, ups)[0]
    first.down_until = 10.0
    chosen = near(ups, frozenset(), found, 5.0)
    assert chosen is not None and chosen[0] is not first
    other = chosen[0].id
    chosen = near(ups, frozenset({other}), found, 5.0)
    assert chosen is not None and chosen[0] is first


def test_a_remote_providers_upstreams_stay_least_outstanding() -> None:
    found = Affinity(b"k" * 16, 3)
    remote = Serving(remote_model(), replicas("a", "b", load=0))
    remote.upstreams[0].outstanding = 5
    assert {choose(remote, found=found)[0].id for _ in range(4)} == {"b"}
    local = Serving(gemma_model(), replicas("a", "b"))
    up, why = choose(local, found=found)
    assert up is rank(found.key, local.upstreams)[0] and "rendezvous" in why
