"""A streamed reply's close: what must run when it ends runs once, however it ends."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from llmgw.gateway.call import Stream


async def two_chunks(log: list[str]) -> AsyncGenerator[bytes, None]:
    try:
        yield b"one"
        yield b"two"
    finally:
        log.append("generator closed")


def recorded_stream(log: list[str]) -> Stream:
    stream = Stream(two_chunks(log))
    stream.on_close(lambda completed: log.append(f"usage settled, completed={completed}"))
    stream.on_close(lambda completed: log.append("upstream released"))
    return stream


async def test_a_stream_written_from_its_rest_is_closed_without_waiting_and_only_once() -> None:
    log: list[str] = []
    stream = recorded_stream(log)
    stream.rest = lambda: b"onetwo"
    stream.on_rest = lambda rest: log.append(f"counted {rest!r}")
    assert stream.take_rest() == b"onetwo"
    stream.close_untaken(True)
    await stream.close(True)  # the writer's usual close afterwards does nothing more
    # The rest is counted before usage is settled; then last added runs first, as with `close`;
    # the generator never ran, so it has nothing to end.
    assert log == ["counted b'onetwo'", "upstream released", "usage settled, completed=True"]


async def test_a_client_gone_before_the_rest_was_written_settles_as_not_completed() -> None:
    log: list[str] = []
    recorded_stream(log).close_untaken(False)
    assert log == ["upstream released", "usage settled, completed=False"]


async def test_a_stream_whose_chunks_were_taken_is_closed_through_its_generator() -> None:
    log: list[str] = []
    stream = recorded_stream(log)
    chunks = stream.chunks
    assert stream.taken and await chunks.__anext__() == b"one"
    await stream.close(False)
    assert log == ["generator closed", "upstream released", "usage settled, completed=False"]
