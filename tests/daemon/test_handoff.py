"""The hand-off between a generation and the response reading it (issue 43): chunks in
order, all that arrived taken in one wake-up, a keep-alive only after a quiet wait of
the full period, and a full hand-off holding the producer back."""

from __future__ import annotations

import asyncio

from skulk_daemon.system.handoff import Handoff


def test_the_reader_takes_everything_that_arrived_together_in_order() -> None:
    async def scenario() -> list[list[int] | None]:
        handoff: Handoff[int] = Handoff(16, keepalive_s=5.0)
        for n in (1, 2, 3):
            await handoff.put(n)
        first = await handoff.take()

        async def later() -> None:
            await asyncio.sleep(0.01)
            await handoff.put(4)

        producer = asyncio.create_task(later())
        second = await handoff.take()
        await producer
        handoff.release()
        return [first, second]

    assert asyncio.run(scenario()) == [[1, 2, 3], [4]]


def test_a_keep_alive_comes_only_after_a_whole_quiet_period() -> None:
    async def scenario() -> tuple[list[str | None], float]:
        loop = asyncio.get_running_loop()
        handoff: Handoff[str] = Handoff(16, keepalive_s=1.0)
        got: list[str | None] = []
        started = loop.time()

        async def produce() -> None:
            # Items every 0.1 s keep each wait well under the period: no keep-alive between.
            for text in ("a", "b", "c"):
                await asyncio.sleep(0.1)
                await handoff.put(text)

        producer = asyncio.create_task(produce())
        while len(got) < 4:
            got.append(None if (items := await handoff.take()) is None else items[0])
        await producer
        handoff.release()
        return got, loop.time() - started

    got, elapsed = asyncio.run(scenario())
    assert got == ["a", "b", "c", None]
    # The keep-alive came a whole period after "c" (0.3 s), not when the one timer
    # (armed at the first wait) first fired at 1.0 s.
    assert elapsed >= 1.3


def test_a_full_handoff_holds_the_producer_until_the_reader_takes() -> None:
    async def scenario() -> tuple[bool, bool, list[int] | None]:
        handoff: Handoff[int] = Handoff(2, keepalive_s=5.0)
        await handoff.put(1)
        await handoff.put(2)
        third = asyncio.create_task(handoff.put(3))
        await asyncio.sleep(0.05)
        held = not third.done()
        taken = await handoff.take()
        await asyncio.wait_for(third, 1.0)
        rest = await handoff.take()
        handoff.release()
        return held, taken == [1, 2], rest

    assert asyncio.run(scenario()) == (True, True, [3])


def test_a_callback_offers_without_waiting_and_is_refused_when_full() -> None:
    # The runner's read callback queues a generation's chunks this way: it cannot
    # wait, so a full hand-off says so (the router then cancels the generation), and
    # only a last item forced in goes past the limit.
    async def scenario() -> tuple[list[bool], list[str] | None]:
        loop = asyncio.get_running_loop()
        handoff: Handoff[str] = Handoff(2, keepalive_s=None)
        accepted: list[bool] = []

        def arrive() -> None:
            accepted.extend(handoff.offer(text) for text in ("a", "b", "c"))
            accepted.append(handoff.offer("end", force=True))

        loop.call_later(0.05, arrive)
        taken = await asyncio.wait_for(handoff.take(), 5.0)
        handoff.release()
        return accepted, taken

    assert asyncio.run(scenario()) == ([True, True, False, True], ["a", "b", "end"])


def test_without_a_keep_alive_a_wait_lasts_until_an_item_comes() -> None:
    async def scenario() -> list[int] | None:
        handoff: Handoff[int] = Handoff(4, keepalive_s=None)
        asyncio.get_running_loop().call_later(0.3, handoff.offer, 7)
        return await asyncio.wait_for(handoff.take(), 5.0)

    assert asyncio.run(scenario()) == [7]
