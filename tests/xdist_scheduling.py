"""How ``pytest -n`` shares the suite between workers: whole modules, and named groups.

Most modules share one daemon, app or model per module, so a module split between two
workers would start it twice; xdist's ``loadgroup`` keeps ``xdist_group`` marks together
but schedules every other test on its own. Here a work unit is the test's group when it
has one (``@pytest.mark.xdist_group("name")``; ``--dist loadgroup`` puts the name after
an ``@`` in the node id), else its module.

The groups: ``plugin_runtime`` (the modules sharing the session's staged manager
runtime, staged once on one worker), ``network`` (network namespaces on fixed private
addresses and mDNS on loopback's shared 5353) and ``timing`` (tests that bound how long
something takes: never two of them at once).
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling


class ModuleOrGroupScheduling(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
        # NOTE: an "@" inside a parametrize id ends before its "]"; only one after it
        # is the group xdist appended.
        if nodeid.rfind("@") > nodeid.rfind("]"):
            return nodeid.rsplit("@", maxsplit=1)[-1]
        return nodeid.split("::", 1)[0]
