"""The C pass over a JSON body's strings and nested values (parsers/llm/_speedups.c,
skip_nested) leaves TopLevelJson (parsers/llm/jsonscan.py) reading what its Python loop
reads: the same top-level values and the same end, on random bodies (strings with escapes,
quotes and brackets, keys with escapes, wanted values nested or not, bodies cut short,
garbage, tiny bounds), fed in pieces cut anywhere (after a backslash, inside a key)."""

from __future__ import annotations

import json
import random

import pytest

from fuzz.targets import read_json_top
from parsers.llm import jsonscan

pytestmark = pytest.mark.skipif(jsonscan._speedups is None, reason="C extension not built (pip install -e .)")

# (a key as its JSON text: the raw bytes between its quotes, escapes as written)
_KEYS = frozenset((b"model", b"usage", b"choices", rb'mo\\\"del'))
_TEXT = ["plain", 'a "quoted" word', "back\\slash\\", "{[}]", "naïve 日本", "line\nbreak", "", "\\\"", "x" * 300]


def _value(rng: random.Random, depth: int):
    roll = rng.random()
    if depth > 3 or roll < 0.4:
        return rng.choice([rng.choice(_TEXT), rng.randint(-9, 10**6), 1.5, True, None])
    if roll < 0.7:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["model", "content", "role", "{", '"']): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _body(rng: random.Random) -> bytes:
    keys = ["model", "usage", "choices", "messages", "input", 'mo\\"del', "{", "stream"]
    obj = {rng.choice(keys): _value(rng, 1) for _ in range(rng.randint(0, 8))}
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, None, 1])).encode()
    roll = rng.random()
    if roll < 0.1:
        text = text[: rng.randint(0, len(text))]  # cut short
    elif roll < 0.15:
        text = rng.choice([b"[1, 2]", b"  \n{", b"not json", b'{"model": "m"} trailing'])
    return text


@pytest.mark.parametrize("seed", range(60))
def test_random_bodies_read_the_same(seed: int):
    rng = random.Random(seed)
    body = _body(rng)
    cuts = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, rng.randint(0, 12)))) if len(body) > 1 else []
    pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    bounds = rng.choice([{}, {}, {"limit": rng.randint(1, len(body) + 1)}, {"value_cap": rng.randint(0, 40)}])
    assert read_json_top(pieces, True, _KEYS, **bounds) == read_json_top(pieces, False, _KEYS, **bounds)


def test_every_cut_of_a_body_reads_the_same():
    body = json.dumps({"messages": [{"content": 'say "hi" \\ {now}'}], 'mo\\"del': "k", "model": "lab",
                       "usage": {"total": [1, {"x": "]"}]}}).encode()  # fmt: skip
    want = read_json_top([body], False, _KEYS)
    assert want == ({b"model": b'"lab"', rb'mo\\\"del': b'"k"', b"usage": b'{"total": [1, {"x": "]"}]}'}, True)
    for cut in range(1, len(body)):
        assert read_json_top([body[:cut], body[cut:]], True, _KEYS) == want, cut


@pytest.mark.parametrize("seed", range(300))
def test_bodies_whole_in_one_feed_read_in_c_as_streamed(seed: int, monkeypatch):
    """A body that comes whole in its first feed is read by top_level_whole at once: the
    same values and end as the streamed reading of the same bytes, in one piece or cut."""
    rng = random.Random(seed)
    body = _body(rng) + rng.choice([b"", b"", b" ", b"\n  ", b"} more"])
    bounds = rng.choice([{}, {}, {"value_cap": rng.randint(0, 40)}, {"limit": rng.randint(1, len(body) + 2)}])
    whole = jsonscan._speedups.top_level_whole
    taken: list = []
    monkeypatch.setattr(jsonscan._speedups, "top_level_whole", lambda *a: taken.append(whole(*a)) or taken[-1])
    got = read_json_top([body], True, _KEYS, **bounds)
    assert got == read_json_top([body], False, _KEYS, **bounds)
    if "limit" not in bounds:  # (a limit stops a streamed reading at the end of a feed)
        cut = rng.randint(0, len(body))
        assert got == read_json_top([body[:cut], body[cut:]], False, _KEYS, **bounds)
    if len(body) < bounds.get("limit", 8 << 20) and body.strip():
        assert len(taken) == 1 and (taken[0] is not None) == got[1]  # (done: whole, else streamed)


@pytest.mark.parametrize(
    ("body", "cap"),
    [
        (b'{"model": "abcd"}', 7),  # a value of exactly value_cap bytes is kept (" \"abcd\"")
        (b'{"model": "abcde"}', 7),  # one more is not
        (b'{"x": 1, ["model"]: 2}', 99),  # a string below the top level is no key
        (b'{"x": 1, {"model": 0}: 2, "model": [1, "]", {"a": "}"}], "usage" : 7 }', 99),
        (b'{"a" "model": 3, "model" : 4 : 5}', 99),  # a second string is no key; ':' again
        (b'{"mo\\\"del": "esc", "usage": {"k": "\\\\"}}', 99),  # escapes in keys and values
        (b' \t{ "model"\n:\x0b 1\x0c ,}', 99),  # whitespace stripped as bytes.strip strips it
        (b'{"model": 1', 99),  # goes on: streamed
        (b'  ', 99),
        (b'[{"model": 1}]', 99),
    ],
)
def test_whole_bodies_at_the_edges(body: bytes, cap: int):
    got = read_json_top([body], True, _KEYS, value_cap=cap)
    assert got == read_json_top([body], False, _KEYS, value_cap=cap)
    assert jsonscan._speedups.top_level_whole(body, _KEYS, cap) == (got[0] if got[1] else None)


@pytest.mark.parametrize(
    ("data", "state", "after"),
    [
        (b'abc"rest', (0, 1, True, False), (4, 1, False, False)),  # a top-level string ends
        (b'ab\\"c"x', (0, 1, True, False), (6, 1, False, False)),  # an escaped quote does not end it
        (b'\\', (0, 2, True, False), (1, 2, True, True)),  # a backslash at the end: escape pending
        (b'"x', (0, 2, True, True), (2, 2, True, False)),  # the pending escape takes the quote
        (b'[1, "]", {"a": [2]}]], 3', (0, 2, False, False), (21, 1, False, False)),
        (b'{"a": [', (0, 2, False, False), (7, 4, False, False)),  # the data ends deeper
        (b', "b": 1', (0, 1, False, False), (0, 1, False, False)),  # at the top level: nothing
    ],
)
def test_what_the_c_pass_takes(data: bytes, state: tuple, after: tuple):
    assert jsonscan._speedups.skip_nested(data, *state) == after
