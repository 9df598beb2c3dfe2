"""The C reader of a chat stream's content events of a known shape
(parsers/llm/_speedups.c, shaped_events) reads exactly what LlmStream.event reads: the same
message rows, TTFT point and stream facts as the Python reader, on random OpenAI chat
streams whose contents include what the shape must refuse (quotes, backslashes, control
characters, empty text, padding, usage, other kinds of event), fed whole or in pieces."""

from __future__ import annotations

import json
import random

import pytest

from fuzz.targets import read_llm_messages
from parsers.llm import taps
from parsers.llm.taps import EventSplitter

pytestmark = pytest.mark.skipif(taps._speedups is None, reason="C extension not built (pip install -e .)")

_CONTENTS = ["Hello", " world", "é", "日本", "a\"b", "back\\slash", "tab\there", "new\nline", "\x01",
             "", " ", "{", "}", "\u2028", "\ud7ff", "plain text, with: punctuation!"]  # fmt: skip


def _chat_event(rng: random.Random, i: int, separators: tuple[str, str]) -> str:
    """One event's data of an OpenAI chat stream (mostly content chunks, most of them of
    one shape)."""
    roll = rng.random()
    choice: dict = {"index": 0, "delta": {"content": rng.choice(_CONTENTS)}, "finish_reason": None}
    event: dict = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000,
                   "model": "m" if rng.random() < 0.95 else "other", "choices": [choice]}  # fmt: skip
    if roll < 0.03:
        choice["delta"] = {"role": "assistant"}
    elif roll < 0.05:
        choice["finish_reason"] = "stop"
        choice["delta"] = {}
    elif roll < 0.07:
        event["usage"] = {"prompt_tokens": 3, "completion_tokens": i}
    elif roll < 0.09:
        return rng.choice(["not json", "[1, 2]", "{broken", "[DONE]"])
    text = json.dumps(event, ensure_ascii=rng.random() < 0.1, separators=separators)
    if rng.random() < 0.03:
        text = rng.choice([" ", "\t", "\u3000"]) + text + rng.choice(["", " ", "\n"])
    if rng.random() < 0.05:  # a raw control character in the string: no JSON
        text = text.replace("\\t", "\t").replace("\\n", "\n").replace("\\u0001", "\x01")
    return text


@pytest.mark.parametrize("seed", range(40))
def test_random_chat_streams_read_the_same(seed: int):
    rng = random.Random(seed)
    separators = rng.choice([(",", ":"), (", ", ": ")])
    texts = [_chat_event(rng, i, separators) for i in range(rng.randint(1, 300))]
    cuts = sorted(rng.sample(range(1, len(texts)), min(len(texts) - 1, rng.randint(0, 20)))) if len(texts) > 1 else []
    batches = [texts[a:b] for a, b in zip([0, *cuts], [*cuts, len(texts)], strict=True)]
    assert read_llm_messages(batches, True) == read_llm_messages(batches, False)


def test_a_plain_stream_is_read_in_c_after_its_first_content_event(monkeypatch):
    taken = []
    real = taps._speedups

    class Counting:
        @staticmethod
        def shaped_events(raw, first, before, after, flags, out):
            stop = real.shaped_events(raw, first, before, after, flags, out)
            taken.append(stop - first)
            return stop

    rng = random.Random(1)
    words = ["Hello", " world", " and", " more"]
    raw = [("message", json.dumps({"object": "chat.completion.chunk", "model": "m",
                                   "choices": [{"index": 0, "delta": {"content": rng.choice(words)}}]}),
            i, 50, 50 * (i + 1)) for i in range(100)]  # fmt: skip
    raw.append(("message", "[DONE]", 100, 8, 5_058))
    monkeypatch.setattr(taps, "_speedups", Counting)
    splitter, out = EventSplitter(), []
    splitter._messages(raw, out)
    assert sum(taken) == 99  # all but the first, which gave the shape; [DONE] in Python
    assert len(out) == 100 and splitter.first_ts == 0 and splitter.stream.done
    texts = [text for _type, text, *_rest in raw]
    assert read_llm_messages([texts], True) == read_llm_messages([texts], False)


@pytest.mark.parametrize(
    ("data", "taken"),
    [
        ('{"c":"xyz"}', 1),
        ('{"c":""}', 0),  # empty content: the shape needs some
        ('{"c":"x\\"y"}', 0),  # an escape
        ('{"c":"xy\\"}', 0),  # an escaped quote: the string does not end there (no JSON)
        ('{"c":"x\ty"}', 0),  # a control character
        (' {"c":"xyz"}', 0),  # padding: str.strip's, in Python
        ('{"c":"xyz"} ', 0),
        ('{"c":"xyz"', 0),
        ('{"d":"xyz"}', 0),
    ],
)
def test_what_the_shape_takes(data: str, taken: int):
    out: list = []
    stop = taps._speedups.shaped_events([("message", data, 5, 10, 20)], 0, '{"c":"', '"}', 7, out)
    assert stop == taken
    assert out == ([(5, 10, 7, 20)] if taken else [])
