"""A daemon registers with its master in the background, so its API can serve while
the election settles: the registration outlasts any number of master-less waits,
and what waits for it (placement) is released once it is in."""

from __future__ import annotations

import asyncio

from skulk_core.ids import NodeId
from skulk_core.state.commands import Command, RegisterNode
from skulk_daemon.node.node import CommandRefused, NoMaster
from skulk_daemon.node.registration import Registration

NODE = NodeId("node-a")


class Master:
    """Answers ``NoMaster`` until ``elected`` is set, then takes every command."""

    def __init__(self, *, refuse: bool = False) -> None:
        self.elected = asyncio.Event()
        self.refuse = refuse
        self.tries = 0
        self.taken: list[Command] = []

    async def submit(self, command: Command) -> object:
        self.tries += 1
        await asyncio.sleep(0)
        if not self.elected.is_set():
            raise NoMaster("no master is elected; the cluster is electing one, retry")
        if self.refuse:
            raise CommandRefused("refused", "not this node")
        self.taken.append(command)
        return []


def registration(master: Master) -> Registration:
    return Registration(master.submit, NODE, no_master=NoMaster, refused=CommandRefused)


def test_a_background_registration_waits_out_the_election() -> None:
    async def scenario() -> None:
        master = Master()
        joining = registration(master)
        await joining.start(wait=False)  # returns at once: the API may serve now
        for _ in range(20):
            await asyncio.sleep(0)
        assert master.tries > 1 and not master.taken  # still electing, still trying
        waiter = asyncio.create_task(joining.done())
        await asyncio.sleep(0.01)
        assert not waiter.done()  # placement would wait here
        master.elected.set()
        await asyncio.wait_for(waiter, 5)
        assert [type(c) for c in master.taken] == [RegisterNode]
        assert isinstance(master.taken[0], RegisterNode) and master.taken[0].node_id == NODE

    asyncio.run(scenario())


def test_a_waited_registration_raises_what_the_master_says() -> None:
    async def scenario() -> None:
        master = Master(refuse=True)
        master.elected.set()
        try:
            await registration(master).start(wait=True)
        except CommandRefused:
            return
        raise AssertionError("a refused registration must raise")

    asyncio.run(scenario())


def test_closing_stops_a_registration_still_waiting_for_a_master() -> None:
    async def scenario() -> None:
        master = Master()
        joining = registration(master)
        await joining.start(wait=False)
        await asyncio.sleep(0.01)
        joining.close()
        await asyncio.wait_for(joining.done(), 1)  # a cancelled one is done at once
        tries = master.tries
        await asyncio.sleep(0.01)
        assert master.tries == tries

    asyncio.run(scenario())
